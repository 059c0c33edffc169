//! Binds the configured listeners and serves the proxy (connections start in
//! [`crate::proxy::front`]) and the API router (axum) until a shutdown future resolves; then stops accepting and lets in-flight
//! requests finish within `http.shutdown_grace`. Requests still held for a scan delay when it
//! ends are answered 503 with `Retry-After` before their connections close.
//!
//! The proxy runs thread-per-core: `worker_threads` OS threads (default one per CPU), each with
//! a single-threaded tokio runtime, its own accept loop on a clone of each proxy listener, and
//! its own keep-alive pool to the upstream. A request, its upstream exchange and its held
//! timer then stay on one thread: no work stealing, no cross-thread wake-ups on the hot path
//! (the shape nginx's workers have; figures in docs/http.md).
//! The API listeners run on the caller's runtime, served like the admin and metrics listeners
//! ([`crate::edge::listen`]: head and body read timeouts, a connection cap).
//!
//! Every proxy thread's accept loop admits a connection under the caps shared by all of them
//! ([`ClientCaps`]: `max_connections` in all, `max_connections_per_client` from one address)
//! and closes it at once past either; `accept` failures back off and are logged sparingly
//! ([`crate::edge::listen::accept`]).
//!
//! [`HttpServer::bind`] and [`HttpServer::run`] are separate so callers (and tests binding port
//! 0) learn the bound addresses before serving; [`serve`] does both.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::http::HttpSettings;
use crate::edge::access_log::AccessLog;
use crate::edge::limits::HeaderLimits;
use crate::edge::listen;
use crate::edge::listen::accept::accept_until;
use crate::edge::listen::budget::ConnectionBudget;
use crate::edge::listen::client_caps::{ClientCaps, Refusals};
use crate::edge::listen::limits::ListenLimits;
use crate::edge::listen::proxy_protocol::{self, Mode as ProxyProtocol};
use crate::edge::render::response::Hints;
use crate::edge::steps::hold::HoldGate;
use crate::edge::steps::Steps;
use crate::engine::decider::Decider;
use crate::proxy::front::{self, Front};
use crate::proxy::hyper::ProxyState;
use crate::proxy::tls::TlsCerts;
use crate::proxy::tunnel::registry::Tunnels;
use crate::proxy::upstream::client::Upstream;
use crate::proxy::upstream::error::UpstreamCounters;
use crate::surfaces::api::own_loop::AuthLoop;
use crate::surfaces::api::router::router;
use crate::surfaces::api::state::{ApiLimits, ApiState};

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
    #[error("cannot start proxy worker thread {index}")]
    Worker {
        index: usize,
        #[source]
        source: io::Error,
    },
}

const PROXY_ROLE: &str = "http.proxy_listen";

/// Time given, once the shutdown grace period is over, to the 503s for requests still held.
const ANSWER_AFTER_GRACE: Duration = Duration::from_secs(2);

/// Listeners bound and state built; nothing served until [`HttpServer::run`].
pub struct HttpServer {
    /// Kept as std listeners: each proxy thread registers a clone with its own runtime.
    proxy_listeners: Vec<std::net::TcpListener>,
    /// `tls_listen`'s, kept like `proxy_listeners`.
    tls_listeners: Vec<std::net::TcpListener>,
    /// The `[[http.tls]]` certificates (replaced on reload).
    tls: Arc<TlsCerts>,
    api_listeners: Vec<TcpListener>,
    /// `grpc_listen`'s: Envoy's gRPC services over the API's state.
    grpc_listeners: Vec<TcpListener>,
    /// What each request's steps need; every proxy thread takes a copy.
    steps: Steps,
    tunnels: Arc<Tunnels>,
    /// HTTP/2 stream counters of every proxy thread.
    h2: Arc<crate::proxy::h2::H2Counters>,
    upstream_counters: Arc<UpstreamCounters>,
    /// The proxy listeners' connection caps, shared by every proxy thread.
    caps: Arc<ClientCaps>,
    settings: HttpSettings,
}

/// Binds with `SO_REUSEADDR` and a deep backlog (bursts of new connections are the norm here).
/// Proxy listeners also get `SO_REUSEPORT`: each proxy thread binds its own socket to the same
/// address and the kernel spreads new connections over them. (A shared listener let one
/// thread's accept loop win nearly every connection: measured, one thread served all of
/// wrk's 64 while the other idled.)
fn bind_one(addr: SocketAddr, role: &'static str) -> Result<TcpListener, ServeError> {
    let err = |source| ServeError::Bind { addr, role, source };
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(err)?;
    socket.set_reuseaddr(true).map_err(err)?;
    if role == PROXY_ROLE {
        socket.set_reuseport(true).map_err(err)?;
    }
    socket.bind(addr).map_err(err)?;
    socket.listen(4096).map_err(err)
}

impl HttpServer {
    /// Binds every configured listener (must be called inside a tokio runtime).
    pub async fn bind(
        settings: &HttpSettings,
        hints: Hints,
        decider: Arc<dyn Decider>,
    ) -> Result<Self, ServeError> {
        let gate = HoldGate::new(
            settings.max_held.get(),
            settings.max_held_per_identity.get(),
        );
        let mut proxy_listeners = Vec::new();
        if settings.upstream.is_some() {
            for &addr in &settings.proxy_listen {
                let l =
                    bind_one(addr, PROXY_ROLE)?
                        .into_std()
                        .map_err(|source| ServeError::Bind {
                            addr,
                            role: PROXY_ROLE,
                            source,
                        })?;
                proxy_listeners.push(l);
            }
        }
        let mut tls_listeners = Vec::new();
        if settings.upstream.is_some() {
            for &addr in &settings.tls_listen {
                let l =
                    bind_one(addr, PROXY_ROLE)?
                        .into_std()
                        .map_err(|source| ServeError::Bind {
                            addr,
                            role: "http.tls_listen",
                            source,
                        })?;
                tls_listeners.push(l);
            }
        }
        let mut api_listeners = Vec::new();
        for &addr in &settings.api_listen {
            api_listeners.push(bind_one(addr, "http.api_listen")?);
        }
        let mut grpc_listeners = Vec::new();
        for &addr in &settings.grpc.listen {
            grpc_listeners.push(bind_one(addr, "http.grpc_listen")?);
        }
        Ok(HttpServer {
            proxy_listeners,
            tls_listeners,
            tls: TlsCerts::new(settings.tls.clone()),
            api_listeners,
            grpc_listeners,
            steps: Steps {
                decider,
                gate,
                hints,
                // The API's holds are never cut short (each proxy thread has its own token).
                grace_over: CancellationToken::new(),
                access_log: AccessLog::off(),
                overload: crate::edge::overload::Overload::new(&settings.overload),
            },
            h2: Arc::default(),
            tunnels: Tunnels::new(
                settings.max_tunnels.get(),
                settings.max_tunnels_per_identity.get(),
            ),
            upstream_counters: Arc::new(UpstreamCounters::default()),
            caps: ClientCaps::new(settings, &ConnectionBudget::for_process(settings)),
            settings: settings.clone(),
        })
    }

    /// The overload ladder (`None`: off), for metrics.
    pub fn overload(&self) -> Option<Arc<crate::edge::overload::Overload>> {
        self.steps.overload.clone()
    }

    pub fn proxy_addrs(&self) -> Result<Vec<SocketAddr>, ServeError> {
        self.proxy_listeners
            .iter()
            .map(|l| l.local_addr().map_err(ServeError::LocalAddr))
            .collect()
    }

    /// The bound `tls_listen` addresses.
    pub fn tls_addrs(&self) -> Result<Vec<SocketAddr>, ServeError> {
        self.tls_listeners
            .iter()
            .map(|l| l.local_addr().map_err(ServeError::LocalAddr))
            .collect()
    }

    /// The TLS certificates in force and the handshake counters, for reloads and metrics.
    pub fn tls(&self) -> Arc<TlsCerts> {
        Arc::clone(&self.tls)
    }

    pub fn api_addrs(&self) -> Result<Vec<SocketAddr>, ServeError> {
        self.api_listeners
            .iter()
            .map(|l| l.local_addr().map_err(ServeError::LocalAddr))
            .collect()
    }

    /// The bound `grpc_listen` addresses.
    pub fn grpc_addrs(&self) -> Result<Vec<SocketAddr>, ServeError> {
        self.grpc_listeners
            .iter()
            .map(|l| l.local_addr().map_err(ServeError::LocalAddr))
            .collect()
    }

    /// Writes `log`'s lines for every surface (the access log is off until this is called).
    pub fn with_access_log(mut self, log: AccessLog) -> Self {
        self.steps.access_log = log;
        self
    }

    /// Held-request gauge and refusal counter, for metrics.
    pub fn hold_gate(&self) -> Arc<HoldGate> {
        Arc::clone(&self.steps.gate)
    }

    /// Open tunnels and their counters, for metrics and reloads.
    pub fn tunnels(&self) -> Arc<Tunnels> {
        Arc::clone(&self.tunnels)
    }

    /// HTTP/2 streams and resets, for metrics.
    pub fn h2_counters(&self) -> Arc<crate::proxy::h2::H2Counters> {
        Arc::clone(&self.h2)
    }

    /// The proxy listeners' connection caps and who holds them.
    pub fn client_caps(&self) -> Arc<ClientCaps> {
        Arc::clone(&self.caps)
    }

    /// Upstream failures by kind, for metrics.
    pub fn upstream_counters(&self) -> Arc<UpstreamCounters> {
        Arc::clone(&self.upstream_counters)
    }

    /// Serves until `shutdown` resolves, then drains within `http.shutdown_grace`.
    ///
    /// Inside, one token says "stop" to every accept loop (proxy threads and API listeners)
    /// and trackers say when their work is done. The token is also cancelled if this future
    /// is dropped or returns early, so nothing it started keeps accepting.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
        let stop = CancellationToken::new();
        let _stop_on_exit = stop.clone().drop_guard();
        let workers = self.start_proxy_workers(&stop)?;
        // The workers hold their own sockets (thread 0 a clone of these). Kept open here, these
        // would go on completing handshakes into a backlog nobody accepts after stop, so a
        // client would hang instead of being refused.
        self.proxy_listeners.clear();
        self.tls_listeners.clear();
        let api_tasks = TaskTracker::new();
        let api = ApiState {
            steps: Arc::new(self.steps.clone()),
            trusted_peers: Arc::new(self.settings.trusted_peers.clone()),
            limits: ApiLimits::from_settings(&self.settings),
            token: self.settings.api_token.clone(),
        };
        let app = router(api.clone());
        let own: Arc<dyn listen::serve::OwnLoop> = Arc::new(AuthLoop(api.clone()));
        let limits = ListenLimits::from_settings(&self.settings);
        for listener in self.api_listeners {
            api_tasks.spawn(listen::serve::serve(
                listener,
                (app.clone(), Some(Arc::clone(&own))),
                limits,
                "http.api_listen",
                stop.clone().cancelled_owned(),
            ));
        }
        let grpc = crate::surfaces::grpc::serve::GrpcOptions::from_settings(&self.settings);
        for listener in self.grpc_listeners {
            api_tasks.spawn(crate::surfaces::grpc::serve::serve(
                listener,
                api.clone(),
                grpc.clone(),
                stop.clone(),
            ));
        }
        api_tasks.close();
        let sweeper = tokio::spawn(crate::proxy::tunnel::lockout::sweep(
            Arc::clone(&self.tunnels),
            Arc::clone(&self.steps.decider),
            stop.clone(),
        ));
        shutdown.await;
        tracing::info!("HTTP shutdown requested");
        stop.cancel();
        api_tasks.wait().await;
        for w in workers {
            // The thread ends once its accept loops drained (bounded by the grace period).
            if tokio::task::spawn_blocking(move || w.join()).await.is_err() {
                tracing::error!("a proxy worker thread panicked");
            }
        }
        let _ = sweeper.await;
        Ok(())
    }

    fn start_proxy_workers(
        &self,
        stop: &CancellationToken,
    ) -> Result<Vec<std::thread::JoinHandle<()>>, ServeError> {
        let Some(up) = self.settings.upstream.clone() else {
            return Ok(Vec::new());
        };
        if self.proxy_listeners.is_empty() && self.tls_listeners.is_empty() {
            return Ok(Vec::new());
        }
        let threads = self
            .settings
            .worker_threads
            .or_else(|| std::thread::available_parallelism().ok())
            .unwrap_or(NonZeroUsize::MIN)
            .get();
        let limits = HeaderLimits {
            max_count: self.settings.max_header_count.get(),
            max_bytes: self.settings.max_header_bytes.get(),
        };
        let mut handles = Vec::with_capacity(threads);
        for index in 0..threads {
            // Thread 0 serves the sockets bound in `bind`; every other thread binds its own
            // to the same (now known) addresses, in the same `SO_REUSEPORT` group.
            let listeners = self
                .proxy_listeners
                .iter()
                .map(|l| (l, false))
                .chain(self.tls_listeners.iter().map(|l| (l, true)))
                .map(|(l, tls)| {
                    if index == 0 {
                        let c = l
                            .try_clone()
                            .map_err(|source| ServeError::Worker { index, source })?;
                        c.set_nonblocking(true)
                            .map_err(|source| ServeError::Worker { index, source })?;
                        return Ok((c, tls));
                    }
                    let addr = l.local_addr().map_err(ServeError::LocalAddr)?;
                    bind_one(addr, PROXY_ROLE)?
                        .into_std()
                        .map(|l| (l, tls))
                        .map_err(|source| ServeError::Worker { index, source })
                })
                .collect::<Result<Vec<_>, ServeError>>()?;
            let steps = Steps {
                grace_over: CancellationToken::new(),
                ..self.steps.clone()
            };
            let tunnels = Arc::clone(&self.tunnels);
            let h2 = Arc::clone(&self.h2);
            let certs = Arc::clone(&self.tls);
            let counters = Arc::clone(&self.upstream_counters);
            let caps = Arc::clone(&self.caps);
            let settings = self.settings.clone();
            let authority = up.authority.clone();
            let stop = stop.clone();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|source| ServeError::Worker { index, source })?;
            let handle = std::thread::Builder::new()
                .name(format!("limiter-proxy-{index}"))
                .spawn(move || {
                    if let Err(err) = crate::proxy::sched::use_batch_policy() {
                        tracing::warn!(error = %err, "proxy thread keeps the default scheduling policy");
                    }
                    rt.block_on(async move {
                        let state = Arc::new(ProxyState {
                            steps,
                            upstream: Upstream::new(authority, &settings, counters),
                            limits,
                            self_service: settings.self_service_path.as_deref().map(Arc::from),
                            tunnels,
                            tunnel_idle: settings.tunnel_idle_timeout,
                            h2: Arc::clone(&h2),
                        });
                        let loops = TaskTracker::new();
                        for (l, tls) in listeners {
                            let tls = tls.then(|| {
                                let acceptor = tokio_rustls::TlsAcceptor::from(certs.server_config(settings.h2.enabled));
                                (acceptor, Arc::clone(&certs))
                            });
                            match TcpListener::from_std(l) {
                                Ok(l) => {
                                    loops.spawn(proxy_loop(
                                        l,
                                        Arc::clone(&state),
                                        Arc::clone(&caps),
                                        settings.clone(),
                                        stop.clone(),
                                        tls,
                                    ));
                                }
                                Err(err) => {
                                    tracing::error!(error = %err, "proxy listener cannot join the worker's runtime")
                                }
                            }
                        }
                        loops.close();
                        loops.wait().await;
                    });
                })
                .map_err(|source| ServeError::Worker { index, source })?;
            handles.push(handle);
        }
        Ok(handles)
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
    serve_bound(server, settings, shutdown).await
}

/// Logs what `server` listens on and serves it until `shutdown` resolves (callers that need
/// the bound server first, e.g. to hand its counters to metrics, bind it themselves).
pub async fn serve_bound(
    server: HttpServer,
    settings: &HttpSettings,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    for a in server.proxy_addrs()? {
        tracing::info!(addr = %a, upstream = %settings.upstream.as_ref().map_or_else(|| "(none)".to_string(), |u| u.authority.to_string()), "reverse proxy listening");
    }
    for a in server.tls_addrs()? {
        tracing::info!(addr = %a, "reverse proxy listening (TLS)");
    }
    for a in server.api_addrs()? {
        tracing::info!(addr = %a, "decision API and /v1/auth listening");
    }
    for a in server.grpc_addrs()? {
        tracing::info!(addr = %a, "Envoy gRPC (ext_authz Check, ShouldRateLimit) listening");
    }
    if server.proxy_listeners.is_empty()
        && server.tls_listeners.is_empty()
        && server.api_listeners.is_empty()
        && server.grpc_listeners.is_empty()
    {
        tracing::warn!(
            "no HTTP listener configured ([http] proxy_listen / api_listen): requests are not \
             metered; only the kernel dataplane enforces"
        );
    }
    server.run(shutdown).await
}

async fn proxy_loop(
    listener: TcpListener,
    state: Arc<ProxyState>,
    caps: Arc<ClientCaps>,
    settings: HttpSettings,
    stop: CancellationToken,
    tls: Option<(tokio_rustls::TlsAcceptor, Arc<TlsCerts>)>,
) {
    let limits = state.limits;
    let hyper = crate::proxy::h2::server_builder(&settings, limits);
    let front = Arc::new(Front {
        state,
        hyper,
        header_read_timeout: settings.header_read_timeout,
        stop: CancellationToken::new(),
    });
    let connections = TaskTracker::new();
    let mut refusals = Refusals::default();
    accept_until(&listener, PROXY_ROLE, stop.cancelled(), |stream, peer| {
        // Under the caps before anything is read; past one, closed at once (dropped).
        let slot = match caps.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(why) => return refusals.log(&caps, why),
        };
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY");
        }
        // The PROXY header (when on) names the client and comes before anything else,
        // TLS included; a refused header closes the connection.
        let pp = (settings.proxy_protocol != ProxyProtocol::Off).then(|| settings.clone());
        let (front, tls) = (Arc::clone(&front), tls.clone());
        connections.spawn(async move {
            let mut slot = slot;
            let (stream, client) = match pp {
                None => (stream, peer),
                Some(s) => {
                    let (t, p) = (s.header_read_timeout, &s.proxy_protocol_peers);
                    let mode = s.proxy_protocol;
                    match proxy_protocol::client(stream, peer, mode, p, t).await {
                        Some(found) => found,
                        None => return,
                    }
                }
            };
            if client != peer && !slot.claimed_by(client) {
                return;
            }
            match tls {
                None => front::serve(front, stream, client).await,
                Some((acceptor, certs)) => {
                    crate::proxy::tls::serve::serve(front, acceptor, certs, stream, client).await
                }
            }
        });
    })
    .await;
    drop(listener);
    front.stop.cancel();
    connections.close();
    // Tunnels run on tasks of their own: drained like connections, closed at the grace's end.
    let tunnels = &front.state.tunnels.tasks;
    tunnels.close();
    let drained = || async {
        connections.wait().await;
        tunnels.wait().await;
    };
    tokio::select! {
        () = drained() => return,
        () = tokio::time::sleep(settings.shutdown_grace) => {}
    }
    // Held requests are answered 503 rather than cut off: their clients learn when to come
    // back instead of seeing an empty reply.
    front.state.steps.grace_over.cancel();
    tokio::select! {
        () = drained() => {}
        () = tokio::time::sleep(ANSWER_AFTER_GRACE) => {
            tracing::warn!("proxy requests still running after the shutdown grace; dropping them");
        }
    }
}
