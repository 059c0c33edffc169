//! Signed agents in the engine: an unknown or stale agent directory is queued for a fetch
//! only once its request is admitted ([`Engine::agent_fetch`]: a refused or locked caller
//! buys no fetch), and [`fetch_directories`] fetches them behind the request for the daemon.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::base::Engine;
use crate::fetch::agent_directories::{self as fetcher, MAX_DIRECTORY_BYTES, MEDIA_TYPE};
use crate::fetch::https::FetchOptions;
use crate::identity::web_bot_auth::directory::DirectoryCache;
use crate::identity::Caller;
use crate::model::{Action, Decision};

impl Engine {
    /// After decision `d` on `caller`: the agent directory its signature named is queued if
    /// due and the request was admitted (within the cache's bounds, per source address).
    pub(crate) fn agent_fetch(&self, caller: &Caller, d: &Decision, now_ms: u64) {
        if let Some(directory) = &caller.agent_fetch {
            if d.action() != Action::Reject {
                self.agent_dirs
                    .request_fetch(directory, caller.group, now_ms);
            }
        }
    }

    /// The agents' key directories (held keys, errors: `limiterctl`, tests).
    pub fn agent_directories(&self) -> &Arc<DirectoryCache> {
        &self.agent_dirs
    }
}

/// Fetches queued agent directories until `stop` (the daemon runs this). The fetch bounds are
/// the `[agents]` section's at start (`fetch_timeout`, `allow_internal`); the CA roots are the
/// system's (`SSL_CERT_FILE` names others).
pub async fn fetch_directories(engine: Arc<Engine>, stop: CancellationToken) {
    let cfg = engine.config();
    let opts = match FetchOptions::new(
        cfg.agents.fetch_timeout,
        MAX_DIRECTORY_BYTES,
        cfg.agents.allow_internal.clone(),
        MEDIA_TYPE,
        None,
    ) {
        Ok(o) => o,
        Err(e) => {
            tracing::error!(error = %e, "agent directories cannot be fetched: no TLS roots");
            return;
        }
    };
    let clock = Arc::clone(engine.clock());
    let cache = Arc::clone(&engine.agent_dirs);
    drop(cfg);
    fetcher::run(cache, opts, move || clock.now_ms(), stop).await;
}
