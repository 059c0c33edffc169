//! Serves both Envoy services on one `[http] grpc_listen` listener (HTTP/2, tonic) until the
//! daemon stops; then calls in flight (a held scan delay among them) get `http.shutdown_grace`
//! to finish before their connections are dropped.
//!
//! Bounds: a message is read up to `[http] api_max_body` bytes (a `CheckRequest` carries the
//! original request's headers, as a `/v1/decide` body does), and its header entries are
//! bounded like the proxy's ([`crate::surfaces::grpc::fields`]). HTTP/2 keep-alive follows
//! `h2_keep_alive_interval` / `h2_keep_alive_timeout`.
//!
//! Connections are bounded like every other listener's (issue 35, D3), by this module's own
//! accept loop in front of tonic's server: at most `api_max_connections` open at once (one
//! more is closed at once), and the HTTP/2 client preface must arrive within
//! `header_read_timeout` of the connection's start, else the connection is closed. Before
//! this, silent connections and half-sent prefaces stayed open for good, before any token
//! was asked for. The preface is waited for on readiness ([`crate::edge::listen::peek`]) and
//! left on the socket for tonic to read.

use std::io;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use envoy_types::pb::envoy::service::auth::v3::authorization_server::AuthorizationServer;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic::transport::Server;

use crate::config::http::HttpSettings;
use crate::edge::listen::accept::{accept_until, Cap};
use crate::edge::listen::budget::ConnectionBudget;
use crate::edge::listen::peek::peek_at_least;
use crate::surfaces::api::state::ApiState;
use crate::surfaces::grpc::check::Check;
use crate::surfaces::grpc::ratelimit::RateLimits;
use crate::surfaces::grpc::token::TokenCheck;

const ROLE: &str = "http.grpc_listen";
/// What every HTTP/2 connection starts with (RFC 9113 §3.4); gRPC is HTTP/2 only.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the listener needs from the config, copied at start (the fields are restart-only).
#[derive(Clone, Debug)]
pub struct GrpcOptions {
    pub route_key: String,
    pub keep_alive_interval: Duration,
    pub keep_alive_timeout: Duration,
    pub shutdown_grace: Duration,
    /// `[http] header_read_timeout`: time for the HTTP/2 preface to arrive.
    pub header_read_timeout: Duration,
    /// `[http] api_max_connections` or its share of the descriptor limit.
    pub max_connections: NonZeroUsize,
}

impl GrpcOptions {
    pub fn from_settings(s: &HttpSettings) -> Self {
        GrpcOptions {
            route_key: s.grpc.route_key.clone(),
            keep_alive_interval: s.h2.keep_alive_interval,
            keep_alive_timeout: s.h2.keep_alive_timeout,
            shutdown_grace: s.shutdown_grace,
            header_read_timeout: s.header_read_timeout,
            max_connections: ConnectionBudget::for_process(s).per_listener,
        }
    }
}

/// Serves `listener` with `state` (the API's: decider, hold bounds, limits, token) until
/// `stop` is cancelled and the grace after it is over.
pub async fn serve(
    listener: TcpListener,
    state: ApiState,
    options: GrpcOptions,
    stop: CancellationToken,
) {
    let max = state.limits.max_body;
    let token = TokenCheck(state.token.clone());
    let check = AuthorizationServer::new(Check {
        state: state.clone(),
    })
    .max_decoding_message_size(max);
    let limits = RateLimitServiceServer::new(RateLimits {
        state,
        route_key: options.route_key.clone(),
    })
    .max_decoding_message_size(max);
    // Connections whose preface came, handed to tonic; the channel is short because each
    // waits here only until tonic's loop takes it.
    let (ready, mut incoming) = mpsc::channel::<GrpcConn>(64);
    tokio::spawn(accept_loop(listener, options.clone(), ready, stop.clone()));
    let incoming = futures_util::stream::poll_fn(move |cx| {
        incoming
            .poll_recv(cx)
            .map(|conn| conn.map(Ok::<_, io::Error>))
    });
    let serving = Server::builder()
        .http2_keepalive_interval(Some(options.keep_alive_interval))
        .http2_keepalive_timeout(Some(options.keep_alive_timeout))
        .add_service(InterceptedService::new(check, token.clone()))
        .add_service(InterceptedService::new(limits, token))
        .serve_with_incoming_shutdown(incoming, stop.clone().cancelled_owned());
    let grace_over = async {
        stop.cancelled().await;
        tokio::time::sleep(options.shutdown_grace).await;
    };
    tokio::select! {
        served = serving => {
            if let Err(err) = served {
                tracing::error!(error = %err, "the gRPC listener failed");
            }
        }
        () = grace_over => {
            tracing::warn!("gRPC calls still running after the shutdown grace; dropping them");
        }
    }
}

/// Accepts until `stop`: past the cap a connection is closed at once; under it, the connection
/// is handed to `ready` once its preface has come, or closed when it has not within
/// `header_read_timeout`.
async fn accept_loop(
    listener: TcpListener,
    options: GrpcOptions,
    ready: mpsc::Sender<GrpcConn>,
    stop: CancellationToken,
) {
    let mut cap = Cap::new(options.max_connections, ROLE);
    accept_until(&listener, ROLE, stop.cancelled(), |stream, peer| {
        let Some(slot) = cap.take(peer, "closed") else {
            return;
        };
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY");
        }
        let ready = ready.clone();
        let timeout = options.header_read_timeout;
        tokio::spawn(async move {
            let mut head = [0u8; PREFACE.len()];
            let came =
                tokio::time::timeout(timeout, peek_at_least(&stream, &mut head, PREFACE.len()))
                    .await;
            match came {
                Ok(Ok(n)) if head[..n] == PREFACE[..] => {
                    // Fails only once the server has stopped taking connections.
                    let _ = ready
                        .send(GrpcConn {
                            stream,
                            _slot: slot,
                        })
                        .await;
                }
                Ok(Ok(_)) => {
                    tracing::debug!(%peer, "gRPC connection closed: no HTTP/2 preface");
                }
                Ok(Err(err)) => tracing::debug!(%peer, error = %err, "gRPC connection failed"),
                Err(_) => tracing::debug!(
                    %peer,
                    "gRPC connection closed: no HTTP/2 preface within header_read_timeout"
                ),
            }
        });
    })
    .await;
}

/// A connection tonic serves, holding its place under the cap for its life.
struct GrpcConn {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl Connected for GrpcConn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for GrpcConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for GrpcConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
