//! The API listener's router: `POST /v1/decide` and `GET /v1/auth`, sharing one state.

use std::net::IpAddr;
use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;
use http::{HeaderMap, HeaderName};
use ipnet::IpNet;

use super::decider::Decider;
use super::hold::HoldGate;
use super::response::Hints;

#[derive(Clone)]
pub struct ApiState {
    pub decider: Arc<dyn Decider>,
    pub gate: Arc<HoldGate>,
    pub hints: Arc<Hints>,
    /// Peers whose `X-Real-IP` is believed.
    pub trusted_peers: Arc<Vec<IpNet>>,
}

impl ApiState {
    pub fn is_trusted(&self, peer: IpAddr) -> bool {
        let peer = match peer {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(peer),
            v4 => v4,
        };
        self.trusted_peers.iter().any(|n| n.contains(&peer))
    }
}

pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/v1/decide", post(super::decide_api::decide))
        .route("/v1/auth", get(super::auth_request::auth))
        .with_state(state)
}

/// Header fields that say who the client is. On `/v1/decide` and `/v1/auth` the client is
/// already resolved (the `ip` field, or `X-Real-IP` from a trusted peer), so these are removed
/// before the engine sees the headers: a client cannot re-route its own identity through them.
pub fn drop_forwarding(h: &mut HeaderMap) {
    for name in [
        HeaderName::from_static("x-forwarded-for"),
        HeaderName::from_static("forwarded"),
        HeaderName::from_static("x-real-ip"),
    ] {
        h.remove(name);
    }
}
