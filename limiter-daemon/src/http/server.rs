//! Binds the configured listeners and serves the proxy (hyper directly: the hot path) and the
//! API router (axum) until a shutdown future resolves; then stops accepting and lets in-flight
//! requests finish within `http.shutdown_grace`.
//!
//! [`HttpServer::bind`] and [`HttpServer::run`] are separate so callers (and tests binding port
//! 0) learn the bound addresses before serving; [`serve`] does both.

use std::convert::Infallible;
use std::future::{Future, IntoFuture};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::api::{router, ApiState};
use super::decider::Decider;
use super::hold::HoldGate;
use super::limits::HeaderLimits;
use super::proxy::{handle, ProxyState};
use super::response::Hints;
use super::upstream::Upstream;
use crate::config::http::HttpSettings;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr} ({role})")]
    Bind {
        addr: SocketAddr,
        role: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("cannot read the bound address of a listener")]
    LocalAddr(#[source] io::Error),
}

/// Listeners bound and state built; nothing served until [`HttpServer::run`].
pub struct HttpServer {
    proxy_listeners: Vec<TcpListener>,
    api_listeners: Vec<TcpListener>,
    proxy: Option<Arc<ProxyState>>,
    api: ApiState,
    gate: Arc<HoldGate>,
    settings: HttpSettings,
}

async fn bind_all(
    addrs: &[SocketAddr],
    role: &'static str,
) -> Result<Vec<TcpListener>, ServeError> {
    let mut out = Vec::with_capacity(addrs.len());
    for &addr in addrs {
        let l = TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { addr, role, source })?;
        out.push(l);
    }
    Ok(out)
}

impl HttpServer {
    pub async fn bind(
        settings: &HttpSettings,
        hints: Hints,
        decider: Arc<dyn Decider>,
    ) -> Result<Self, ServeError> {
        let gate = HoldGate::new(
            settings.max_held.get(),
            settings.max_held_per_identity.get(),
        );
        let proxy = settings.upstream.as_ref().map(|up| {
            Arc::new(ProxyState {
                decider: Arc::clone(&decider),
                upstream: Upstream::new(up.authority.clone(), settings),
                gate: Arc::clone(&gate),
                hints: hints.clone(),
                limits: HeaderLimits {
                    max_count: settings.max_header_count.get(),
                    max_bytes: settings.max_header_bytes.get(),
                },
            })
        });
        let api = ApiState {
            decider,
            gate: Arc::clone(&gate),
            hints: Arc::new(hints),
            trusted_peers: Arc::new(settings.trusted_peers.clone()),
        };
        Ok(HttpServer {
            proxy_listeners: if proxy.is_some() {
                bind_all(&settings.proxy_listen, "http.proxy_listen").await?
            } else {
                Vec::new()
            },
            api_listeners: bind_all(&settings.api_listen, "http.api_listen").await?,
            proxy,
            api,
            gate,
            settings: settings.clone(),
        })
    }

    pub fn proxy_addrs(&self) -> Result<Vec<SocketAddr>, ServeError> {
        self.proxy_listeners
            .iter()
            .map(|l| l.local_addr().map_err(ServeError::LocalAddr))
            .collect()
    }

    pub fn api_addrs(&self) -> Result<Vec<SocketAddr>, ServeError> {
        self.api_listeners
            .iter()
            .map(|l| l.local_addr().map_err(ServeError::LocalAddr))
            .collect()
    }

    /// Held-request gauge and refusal counter, for metrics.
    pub fn hold_gate(&self) -> Arc<HoldGate> {
        Arc::clone(&self.gate)
    }

    /// Serves until `shutdown` resolves, then drains within `http.shutdown_grace`.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        if let Some(state) = &self.proxy {
            for listener in self.proxy_listeners {
                tasks.spawn(proxy_loop(
                    listener,
                    Arc::clone(state),
                    self.settings.clone(),
                    stop_rx.clone(),
                ));
            }
        }
        let app = router(self.api.clone());
        for listener in self.api_listeners {
            let mut rx = stop_rx.clone();
            let mut rx_grace = stop_rx.clone();
            let app = app.clone();
            let grace = self.settings.shutdown_grace;
            tasks.spawn(async move {
                let serve = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
                    .with_graceful_shutdown(async move { stopped(&mut rx).await })
                    .into_future();
                // axum drains without a deadline; bound it like the proxy.
                let deadline = async move {
                    stopped(&mut rx_grace).await;
                    tokio::time::sleep(grace).await;
                };
                tokio::select! {
                    res = serve => if let Err(err) = res {
                        tracing::warn!(error = %err, "API listener failed");
                    },
                    _ = deadline => tracing::warn!("API requests still running after the shutdown grace; dropping them"),
                }
            });
        }
        shutdown.await;
        tracing::info!("HTTP shutdown requested");
        let _ = stop_tx.send(true);
        while tasks.join_next().await.is_some() {}
        Ok(())
    }
}

/// Serves `settings`' listeners with `decider` until `shutdown` resolves.
pub async fn serve(
    settings: &HttpSettings,
    hints: Hints,
    decider: Arc<dyn Decider>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let server = HttpServer::bind(settings, hints, decider).await?;
    for a in server.proxy_addrs()? {
        tracing::info!(addr = %a, "reverse proxy listening");
    }
    for a in server.api_addrs()? {
        tracing::info!(addr = %a, "decision API and /v1/auth listening");
    }
    if server.proxy_listeners.is_empty() && server.api_listeners.is_empty() {
        tracing::warn!(
            "no HTTP listener configured ([http] proxy_listen / api_listen): requests are not \
             metered; only the kernel dataplane enforces"
        );
    }
    server.run(shutdown).await
}

/// Resolves once stop was signalled (or the sender is gone, which also means stop).
async fn stopped(rx: &mut watch::Receiver<bool>) {
    // The guard returned by `wait_for` is dropped here, before any other await.
    let _ = rx.wait_for(|stop| *stop).await.map(|_| ());
}

async fn proxy_loop(
    listener: TcpListener,
    state: Arc<ProxyState>,
    settings: HttpSettings,
    mut stop: watch::Receiver<bool>,
) {
    let limits = state.limits;
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
        .max_headers(limits.parser_max_headers())
        .keep_alive(true);
    let graceful = GracefulShutdown::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(err) => {
                        // Out of descriptors and the like: back off briefly instead of spinning.
                        tracing::warn!(error = %err, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if let Err(err) = stream.set_nodelay(true) {
                    tracing::debug!(error = %err, "cannot set TCP_NODELAY");
                }
                let state = Arc::clone(&state);
                let svc = service_fn(move |req| {
                    let state = Arc::clone(&state);
                    async move { Ok::<_, Infallible>(handle(&state, peer.ip(), req).await) }
                });
                let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), svc));
                tokio::spawn(async move {
                    if let Err(err) = conn.await {
                        tracing::debug!(error = %err, "proxy connection ended with an error");
                    }
                });
            }
            () = stopped(&mut stop) => break,
        }
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(settings.shutdown_grace) => {
            tracing::warn!("proxy requests still running after the shutdown grace; dropping them");
        }
    }
}
