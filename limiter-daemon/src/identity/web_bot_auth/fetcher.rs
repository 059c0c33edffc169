//! The task that fetches agents' directories behind the request: it takes what
//! [`DirectoryCache::key`] queued, GETs it with [`crate::identity::https_fetch`] (HTTPS, 200
//! only, no redirects, a timeout, a size bound, no internal targets) and hands the answer to
//! [`DirectoryCache::landed`]. Failures are logged; the cache keeps old keys and backs off.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::directory::{max_age, DirectoryCache, Fetched};
use crate::identity::https_fetch::{self, FetchOptions};

/// The media type a directory is served as (the directory draft).
pub const MEDIA_TYPE: &str = "application/http-message-signatures-directory+json";
/// The most bytes a directory may have.
pub const MAX_DIRECTORY_BYTES: usize = 64 * 1024;

/// Fetches one queued directory at a time until `stop`; `now_ms` is the daemon's clock.
pub async fn run(
    cache: Arc<DirectoryCache>,
    opts: FetchOptions,
    now_ms: impl Fn() -> u64,
    stop: CancellationToken,
) {
    loop {
        while let Some((url, source)) = cache.next_fetch() {
            let result = https_fetch::get(&url, &opts).await.map(|r| Fetched {
                max_age_s: r.cache_control.as_deref().and_then(max_age),
                body: r.body,
            });
            match cache.landed(&url, source, result, now_ms()) {
                Ok(n) => tracing::info!(directory = %url, keys = n, "agent directory fetched"),
                Err(e) => tracing::warn!(directory = %url, error = %e, "agent directory refused"),
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = cache.wait_queued() => {}
        }
    }
}
