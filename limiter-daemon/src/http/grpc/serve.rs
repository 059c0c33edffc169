//! Serves both Envoy services on one `[http] grpc_listen` listener (HTTP/2, tonic) until the
//! daemon stops; then calls in flight (a held scan delay among them) get `http.shutdown_grace`
//! to finish before their connections are dropped.
//!
//! Bounds: a message is read up to `[http] api_max_body` bytes (a `CheckRequest` carries the
//! original request's headers, as a `/v1/decide` body does), and its header entries are
//! bounded like the proxy's ([`crate::http::grpc::fields`]). HTTP/2 keep-alive follows
//! `h2_keep_alive_interval` / `h2_keep_alive_timeout`.

use std::time::Duration;

use envoy_types::pb::envoy::service::auth::v3::authorization_server::AuthorizationServer;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

use crate::config::http::HttpSettings;
use crate::http::api::state::ApiState;
use crate::http::grpc::check::Check;
use crate::http::grpc::ratelimit::RateLimits;
use crate::http::grpc::token::TokenCheck;

/// What the listener needs from the config, copied at start (the fields are restart-only).
#[derive(Clone, Debug)]
pub struct GrpcOptions {
    pub route_key: String,
    pub keep_alive_interval: Duration,
    pub keep_alive_timeout: Duration,
    pub shutdown_grace: Duration,
}

impl GrpcOptions {
    pub fn from_settings(s: &HttpSettings) -> Self {
        GrpcOptions {
            route_key: s.grpc.route_key.clone(),
            keep_alive_interval: s.h2.keep_alive_interval,
            keep_alive_timeout: s.h2.keep_alive_timeout,
            shutdown_grace: s.shutdown_grace,
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
        route_key: options.route_key,
    })
    .max_decoding_message_size(max);
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
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
