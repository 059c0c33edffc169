//! What every admin handler shares: the engine, the kernel maps when the dataplane runs, the
//! config file's path (for `GET /admin/v1/config`), the reload hook, the metrics registry (for
//! `GET /admin/v1/stats`) and the token's digest.

use std::path::PathBuf;
use std::sync::Arc;

use super::talkers::Talkers;
use crate::config::kernel::KernelMode;
use crate::config::ConfigError;
use crate::engine::Engine;
use crate::kernel::maps::KernelMaps;
use crate::metrics::Metrics;

/// The reload hook the app provides: `Ok` lists the changes applied, `Err` is the refusal (its
/// field and line, when the variant has them, go into the 422 problem).
pub type ReloadFn = Arc<dyn Fn() -> Result<Vec<String>, ConfigError> + Send + Sync>;

/// The kernel half as the admin API sees it.
#[derive(Clone)]
pub struct KernelView {
    pub mode: KernelMode,
    /// `None`: userspace-only (mode `off`, or `auto` that could not attach).
    pub maps: Option<Arc<KernelMaps>>,
}

#[derive(Clone)]
pub struct AdminState {
    pub engine: Arc<Engine>,
    pub kernel: KernelView,
    /// The file the daemon was started with.
    pub config_path: PathBuf,
    /// `None`: the endpoint answers 503 "reload not wired".
    pub reload: Option<ReloadFn>,
    /// `None`: `GET /admin/v1/stats` answers 503 "stats not wired".
    pub metrics: Option<Arc<Metrics>>,
    /// The last five minutes per caller, fed by the metrics' decider wrapper once wired.
    pub talkers: Arc<Talkers>,
    /// SHA-256 of the token: compared to the digest of what a request presents.
    pub(crate) token_digest: [u8; 32],
}

impl AdminState {
    pub fn new(
        engine: Arc<Engine>,
        kernel: KernelView,
        config_path: PathBuf,
        reload: Option<ReloadFn>,
        token: &str,
    ) -> Self {
        AdminState {
            engine,
            kernel,
            config_path,
            reload,
            metrics: None,
            talkers: Arc::default(),
            token_digest: digest(token.as_bytes()),
        }
    }

    /// The registry whose decisions, talkers and held requests the stats endpoint reports.
    /// Decisions from then on feed [`Self::talkers`].
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        metrics.talkers.set(Arc::clone(&self.talkers) as _);
        self.metrics = Some(metrics);
        self
    }
}

/// SHA-256 of a token: what the bearer check compares (fixed length, so the comparison's time
/// says nothing about the token's length).
pub(crate) fn digest(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes).into()
}
