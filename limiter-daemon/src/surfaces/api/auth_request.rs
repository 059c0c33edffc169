//! `/v1/auth` (any method) for forward auth: nginx `auth_request`, Caddy `forward_auth`,
//! Traefik `forwardAuth` and Envoy's HTTP ext_authz ask before serving each request.
//!
//! - Convention: the original method, path and client by the front end's own fields
//!   ([`crate::surfaces::api::auth_convention`]); a request matching none gets a 400 that lists the
//!   fields each front end sends. The original request's other headers (cookie, authorization,
//!   API key) identify the caller.
//! - Limits: the request's own header fields are held to `[http] max_header_count` /
//!   `max_header_bytes` like the proxy's (431), below hyper's parser ceiling.
//! - Answer: allow is `204` (`200` for Envoy, which takes nothing else), reject the daemon's
//!   `429` with its problem+json body, both with the rate-limit headers, so a front end can copy
//!   them onto the response; a delay is held here (bounded, `503` past the bound) and then
//!   allowed.
//!
//! nginx treats any status other than 2xx/401/403 from the auth subrequest as an error, so the
//! shipped config (`examples/nginx/`) turns that error back into a 429 built from the headers
//! captured with `auth_request_set`; the whole problem document travels in `x-limiter-problem`
//! for that purpose. Caddy, Traefik and Envoy hand a non-2xx answer to the client as it is.

use std::net::{IpAddr, SocketAddr};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};

use crate::edge::limits::too_large;
use crate::edge::render::problem;
use crate::edge::render::response::{problem as rejection_problem, write_headers};
use crate::edge::steps::Settled;
use crate::engine::decider::RequestView;
use crate::model::Action;
use crate::surfaces::api::access;
use crate::surfaces::api::auth_convention::{caller, original, strip};
use crate::surfaces::api::state::{drop_forwarding, ApiState};

pub use crate::surfaces::api::auth_convention::{X_ORIGINAL_METHOD, X_ORIGINAL_URI, X_REAL_IP};
/// The 429 problem document, compact JSON, for nginx to replay as the body.
pub const X_LIMITER_PROBLEM: HeaderName = HeaderName::from_static("x-limiter-problem");

pub async fn auth(
    State(state): State<ApiState>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response<Body> {
    // The request taken whole: extracting its method, URI and headers would clone each.
    let (parts, _) = req.into_parts();
    answer(&state, addr.ip(), &parts.method, &parts.uri, parts.headers)
        .await
        .map(Body::from)
}

/// The answer to a forward-auth request from `peer`, whichever loop read it (the API's own,
/// [`crate::surfaces::api::own_loop`], or axum's router).
pub async fn answer(
    state: &ApiState,
    peer: IpAddr,
    method: &Method,
    uri: &Uri,
    mut headers: HeaderMap,
) -> Response<Bytes> {
    if let Err(err) = state.limits.headers.check(&headers) {
        return too_large(err);
    }
    let orig = match original(method, uri, &headers) {
        Ok(o) => o,
        Err(e) => {
            let mut p = problem::Problem::new(http::StatusCode::BAD_REQUEST, None, e.detail);
            if let Some(field) = e.field {
                p = p.with("field", field);
            }
            return p.into_response();
        }
    };
    if let Some(refusal) = crate::model::request_path::refusal(&orig.path) {
        // A 400, not a decision: the front end may read the path as another route than this
        // daemon would. nginx replays it from `x-limiter-problem` like a 429.
        let p = problem::Problem::new(http::StatusCode::BAD_REQUEST, None, refusal.detail())
            .with("field", orig.front.path_field());
        let compact = p.to_bytes();
        let mut resp = p.into_response();
        if let Ok(v) = HeaderValue::from_bytes(&compact) {
            resp.headers_mut().insert(X_LIMITER_PROBLEM, v);
        }
        return resp;
    }
    let client = caller(orig.front, peer, &headers, &state.trusted_peers);
    let (method, path) = (orig.method, orig.path);
    let host = access::host_of(state, &headers);
    drop_forwarding(&mut headers);
    strip(&mut headers);

    let view = RequestView {
        client,
        method: &method,
        path: &path,
        headers: &headers,
    };
    let d = match state.steps.settle(&view, None).await {
        Settled::Allowed(d) => d,
        Settled::Refused {
            decision,
            mut response,
        } => {
            // nginx replays a 429 from the captured headers, so the problem document travels
            // in one.
            if decision.action() == Action::Reject {
                let compact = rejection_problem(&decision, &state.steps.hints).to_bytes();
                if let Ok(v) = HeaderValue::from_bytes(&compact) {
                    response.headers_mut().insert(X_LIMITER_PROBLEM, v);
                }
            }
            let (ip, host) = (client.ip(), host.as_deref());
            return access::described(state, response, ip, &method, host, &path, &decision);
        }
    };
    let mut resp = Response::new(Bytes::new());
    *resp.status_mut() = orig.front.allow_status();
    write_headers(&d, resp.headers_mut());
    let host = host.as_deref();
    access::described(state, resp, client.ip(), &method, host, &path, &d)
}
