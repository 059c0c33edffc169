//! The admin listener: bound before the daemon reports ready (a taken port is a start-up
//! error), served until the app's shutdown fires, within the `[http]` listener bounds (see
//! [`crate::edge::listen`]).

use std::net::SocketAddr;

use anyhow::Context as _;
use tokio::net::TcpListener;

use super::routes::router;
use super::state::AdminState;
use crate::edge::listen::limits::ListenLimits;

pub struct AdminServer {
    listener: TcpListener,
    state: AdminState,
    limits: ListenLimits,
}

impl AdminServer {
    pub async fn bind(addr: SocketAddr, state: AdminState) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the admin API on {addr} ([admin] listen)"))?;
        Ok(AdminServer {
            listener,
            state,
            limits: ListenLimits::default(),
        })
    }

    /// Serves within `limits` instead of the defaults.
    pub fn with_limits(mut self, limits: ListenLimits) -> Self {
        self.limits = limits;
        self
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `stop` completes; requests in flight then finish within the grace.
    pub async fn run(
        self,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        crate::edge::listen::serve::serve(
            self.listener,
            (router(self.state), None),
            self.limits,
            "admin.listen",
            stop,
        )
        .await;
        Ok(())
    }
}

/// Resolves the token (logging where it is, never what), builds the state and binds
/// `[admin] listen`; `None` when the admin API is off.
pub async fn start(
    engine: std::sync::Arc<crate::engine::Engine>,
    kernel: super::state::KernelView,
    config_path: std::path::PathBuf,
    reload: Option<super::state::ReloadFn>,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    limits: ListenLimits,
) -> anyhow::Result<Option<AdminServer>> {
    let cfg = engine.config();
    let Some(addr) = cfg.admin.listen else {
        tracing::warn!("admin API disabled (admin.listen = \"\")");
        return Ok(None);
    };
    let env = std::env::var(crate::config::admin::TOKEN_ENV).ok();
    let (token, source) = super::token::resolve(&cfg, env)?;
    match &source {
        super::token::TokenSource::Generated(p) => {
            tracing::info!(path = %p.display(), "admin token generated (mode 0600); limiterctl reads it from there")
        }
        super::token::TokenSource::StateFile(p) | super::token::TokenSource::File(p) => {
            tracing::info!(path = %p.display(), "admin token read from file")
        }
        super::token::TokenSource::Env => {
            tracing::info!("admin token taken from {}", crate::config::admin::TOKEN_ENV)
        }
    }
    let state = AdminState::new(engine, kernel, config_path, reload, &token).with_metrics(metrics);
    let server = AdminServer::bind(addr, state).await?.with_limits(limits);
    tracing::info!(addr = %server.local_addr()?, "admin API listening");
    Ok(Some(server))
}
