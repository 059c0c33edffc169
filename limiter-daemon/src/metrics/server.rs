//! The operator listener: `GET /metrics` (OpenMetrics text, or the classic text format to an
//! `Accept` that prefers it: [`super::negotiate`]), `GET /healthz` (200 while the process
//! serves) and `GET /readyz` (200, or 503 with a JSON body naming what is not ready).
//!
//! Its own listener, loopback by default (`[metrics] listen`), so metrics never share the
//! public proxy port; served within the `[http]` listener bounds ([`crate::edge::listen`]).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tokio::net::TcpListener;

use super::negotiate::negotiate;
use super::readiness::Readiness;
use super::Metrics;
use crate::edge::listen::limits::ListenLimits;

#[derive(Debug, thiserror::Error)]
pub enum MetricsServerError {
    #[error("cannot listen on {addr} (metrics.listen)")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
}

pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(metrics)
}

async fn scrape(State(m): State<Arc<Metrics>>, headers: HeaderMap) -> Response {
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    let format = negotiate((!accept.is_empty()).then_some(accept.as_str()));
    // Scrape-time sources may read the store and kernel maps: off the async workers.
    let (body, content_type) = match tokio::task::spawn_blocking(move || m.render_as(format)).await
    {
        Ok(b) => b,
        Err(err) => {
            tracing::error!(error = %err, "metrics rendering failed");
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::VARY, "Accept"),
        ],
        body,
    )
        .into_response()
}

async fn healthz() -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "ok\n",
    )
        .into_response()
}

async fn readyz(State(m): State<Arc<Metrics>>) -> Response {
    let r = Readiness::check(&m.sources);
    let status = if r.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(r)).into_response()
}

/// A bound operator listener; nothing served until [`MetricsServer::run`].
pub struct MetricsServer {
    listener: TcpListener,
    metrics: Arc<Metrics>,
    limits: ListenLimits,
}

impl MetricsServer {
    pub async fn bind(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<Self, MetricsServerError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| MetricsServerError::Bind { addr, source })?;
        Ok(MetricsServer {
            listener,
            metrics,
            limits: ListenLimits::default(),
        })
    }

    /// Serves within `limits` (`[http]`'s listener bounds) instead of the defaults.
    pub fn with_limits(mut self, limits: ListenLimits) -> Self {
        self.limits = limits;
        self
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), MetricsServerError> {
        crate::edge::listen::serve::serve(
            self.listener,
            (router(self.metrics), None),
            self.limits,
            "metrics.listen",
            shutdown,
        )
        .await;
        Ok(())
    }
}
