//! The task that fetches agents' directories behind the request: it takes what
//! [`DirectoryCache::request_fetch`] queued, GETs it with [`super::https`]
//! (HTTPS, 200 only, no redirects, a timeout, a size bound, no internal targets) and hands the
//! answer to [`DirectoryCache::landed`]. Failures are logged; the cache keeps old keys and
//! backs off.
//!
//! Up to [`MAX_CONCURRENT_FETCHES`] run at once (and [`MAX_FETCHES_PER_HOST`] to one host,
//! which the cache enforces when it hands them out), so directories that stall
//! until the timeout hold a few slots, not the queue: a valid agent behind them waits for a
//! free slot, not for every stalled fetch in turn.
//!
//! [`MAX_FETCHES_PER_HOST`]: crate::identity::web_bot_auth::directory::MAX_FETCHES_PER_HOST

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio_util::sync::CancellationToken;

use super::https::{self, FetchOptions};
use crate::identity::web_bot_auth::directory::{max_age, DirectoryCache, Fetched};

/// The media type a directory is served as (the directory draft).
pub const MEDIA_TYPE: &str = "application/http-message-signatures-directory+json";
/// The most bytes a directory may have.
pub const MAX_DIRECTORY_BYTES: usize = 64 * 1024;

/// Directory fetches running at once.
pub const MAX_CONCURRENT_FETCHES: usize = 8;

type Landing = (String, IpAddr, Result<Fetched, String>);

/// Fetches queued directories, [`MAX_CONCURRENT_FETCHES`] at once, until `stop`; `now_ms` is
/// the daemon's clock.
pub async fn run(
    cache: Arc<DirectoryCache>,
    opts: FetchOptions,
    now_ms: impl Fn() -> u64,
    stop: CancellationToken,
) {
    // Polled in this task: fetches are I/O, and a stop drops them all at once.
    let mut running: FuturesUnordered<Pin<Box<dyn Future<Output = Landing> + Send>>> =
        FuturesUnordered::new();
    loop {
        while running.len() < MAX_CONCURRENT_FETCHES {
            let Some((url, source)) = cache.next_fetch() else {
                break;
            };
            let opts = opts.clone();
            running.push(Box::pin(async move {
                let result = https::get(&url, &opts).await.map(|r| Fetched {
                    max_age_s: r.cache_control.as_deref().and_then(max_age),
                    body: r.body,
                });
                (url, source, result)
            }));
        }
        tokio::select! {
            () = stop.cancelled() => return,
            Some((url, source, result)) = running.next(), if !running.is_empty() => {
                match cache.landed(&url, source, result, now_ms()) {
                    Ok(n) => tracing::info!(directory = %url, keys = n, "agent directory fetched"),
                    Err(e) => {
                        tracing::warn!(directory = %url, error = %e, "agent directory refused");
                    }
                }
            }
            () = cache.wait_queued() => {}
        }
    }
}
