//! The reverse proxy's request path: check the head's limits, decide, then reject (429), hold
//! for a scan delay (bounded; 503 past the bound), or forward to the upstream with hop-by-hop
//! fields stripped and `X-Forwarded-For` appended. Bodies are streamed, never buffered; the
//! upstream's status, headers and body pass through, with the rate-limit headers added.

use std::net::IpAddr;
use std::sync::Arc;

use http::{Request, Response, Version};
use hyper::body::Incoming;

use super::body::{full, streamed, ProxyBody};
use super::decider::{Decider, RequestView};
use super::hold::HoldGate;
use super::hop::{append_forwarded_for, strip_hop_by_hop};
use super::limits::{too_large, HeaderLimits};
use super::problem;
use super::response::{hold_overflow, rejection, write_headers, Hints};
use super::upstream::{Upstream, UpstreamError};
use crate::engine::decision::Action;

/// Everything the proxy needs per request, shared by all connections.
pub struct ProxyState {
    pub decider: Arc<dyn Decider>,
    pub upstream: Arc<Upstream>,
    pub gate: Arc<HoldGate>,
    pub hints: Hints,
    pub limits: HeaderLimits,
}

/// Answers one request from `peer` (the TCP peer's address).
pub async fn handle(
    state: &ProxyState,
    peer: IpAddr,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    if let Err(err) = state.limits.check(req.headers()) {
        tracing::debug!(%peer, %err, "request head over limits");
        return too_large(err).map(full);
    }
    let decision = state.decider.decide(&RequestView {
        peer,
        method: req.method(),
        path: req.uri().path(),
        headers: req.headers(),
    });
    match decision.action {
        Action::Reject => return rejection(&decision, &state.hints).map(full),
        Action::Delay => {
            let Some(permit) = state.gate.try_hold(&decision.identity) else {
                tracing::debug!(identity = %decision.identity, "held-request bound reached");
                return hold_overflow(&decision).map(full);
            };
            // An async timer: the held request costs a task, not a thread. If the client goes
            // away, hyper drops this future and the permit with it.
            // Boxed: a held request is the rare case, and an inline `Sleep` would be copied with
            // every request's future.
            Box::pin(tokio::time::sleep(decision.delay)).await;
            drop(permit);
        }
        Action::Allow => {}
    }

    let (mut parts, body) = req.into_parts();
    let client_version = parts.version;
    strip_hop_by_hop(&mut parts.headers);
    append_forwarded_for(&mut parts.headers, peer);
    // Upstream connections are HTTP/1.1 keep-alive whatever the client spoke.
    parts.version = Version::HTTP_11;
    match state.upstream.send(Request::from_parts(parts, body)).await {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            // Answer in the client's protocol version, whatever the upstream spoke.
            parts.version = client_version;
            strip_hop_by_hop(&mut parts.headers);
            write_headers(&decision, &mut parts.headers);
            Response::from_parts(parts, streamed(body))
        }
        Err(err) => {
            tracing::warn!(error = %err, source = ?std::error::Error::source(&err), "forwarding failed");
            let mut resp = match err {
                UpstreamError::Timeout { timeout, .. } => problem::gateway_timeout(format!(
                    "The upstream application did not answer within {} s. Retry later.",
                    timeout.as_secs_f64()
                )),
                UpstreamError::Unreachable { .. } => {
                    problem::bad_gateway("The upstream application cannot be reached. Retry later.")
                }
                UpstreamError::Failed { .. } => problem::bad_gateway(
                    "The upstream application broke off the exchange. Retry later.",
                ),
            };
            // The request was metered all the same: the caller sees what it has left.
            write_headers(&decision, resp.headers_mut());
            resp.map(full)
        }
    }
}
