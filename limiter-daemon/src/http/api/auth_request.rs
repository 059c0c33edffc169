//! `GET /v1/auth` for nginx `auth_request`: nginx asks before serving each request.
//!
//! - Client: `X-Real-IP` when the TCP peer is a trusted peer (nginx), else the peer itself. A
//!   trusted peer's `X-Real-IP` that is no address makes an unattributed caller of that peer.
//! - Request: path from `X-Original-URI` (required), method from `X-Original-Method` (GET when
//!   absent); the original request's other headers (cookie, authorization, API key) identify
//!   the caller.
//! - Limits: the request's own header fields are held to `[http] max_header_count` /
//!   `max_header_bytes` like the proxy's (431), below hyper's parser ceiling.
//! - Answer: `204` allow and `429` reject, both with the rate-limit headers; a delay is held
//!   here (bounded, `503` past the bound) and then answered `204`.
//!
//! nginx treats any status other than 2xx/401/403 from the auth subrequest as an error, so the
//! shipped config (`examples/nginx/`) turns that error back into a 429 built from the headers
//! captured with `auth_request_set`; the whole problem document travels in `x-limiter-problem`
//! for that purpose.

use std::net::{IpAddr, SocketAddr};

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::response::Response;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};

use crate::engine::decider::{Decided, RequestView};
use crate::http::api::state::{drop_forwarding, ApiState};
use crate::http::proxy::admit::{admission, Admission};
use crate::http::proxy::limits::too_large;
use crate::http::render::problem;
use crate::http::render::response::{problem as rejection_problem, write_headers};
use crate::identity::client_ip::Client;
use crate::model::Action;

pub const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
pub const X_ORIGINAL_URI: HeaderName = HeaderName::from_static("x-original-uri");
pub const X_ORIGINAL_METHOD: HeaderName = HeaderName::from_static("x-original-method");
/// The 429 problem document, compact JSON, for nginx to replay as the body.
pub const X_LIMITER_PROBLEM: HeaderName = HeaderName::from_static("x-limiter-problem");

/// The client behind the subrequest (see [`crate::identity::client_ip::real_ip`]).
pub fn client_ip(state: &ApiState, peer: IpAddr, headers: &HeaderMap) -> Client {
    crate::identity::client_ip::real_ip(peer, headers.get(&X_REAL_IP), &state.trusted_peers)
}

pub async fn auth(
    State(state): State<ApiState>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    mut headers: HeaderMap,
) -> Response<Body> {
    if let Err(err) = state.limits.headers.check(&headers) {
        return too_large(err).map(Body::from);
    }
    let client = client_ip(&state, addr.ip(), &headers);
    let Some(uri) = headers.get(&X_ORIGINAL_URI).and_then(|v| v.to_str().ok()) else {
        return problem::bad_request(
            "Header X-Original-URI is missing or not text; in nginx set \
             `proxy_set_header X-Original-URI $request_uri;` on the auth location.",
        )
        .map(Body::from);
    };
    let path = uri.split('?').next().unwrap_or("/").to_string();
    if !path.starts_with('/') {
        return problem::bad_request(format!(
            "Header X-Original-URI {path:?} must start with `/`."
        ))
        .map(Body::from);
    }
    let method = headers
        .get(&X_ORIGINAL_METHOD)
        .and_then(|v| Method::from_bytes(v.as_bytes()).ok())
        .unwrap_or(Method::GET);
    drop_forwarding(&mut headers);
    headers.remove(&X_ORIGINAL_URI);
    headers.remove(&X_ORIGINAL_METHOD);

    let d = match state.decider.decide_async(&RequestView {
        peer: client.ip(),
        method: &method,
        path: &path,
        headers: &headers,
        unattributed: matches!(client, Client::Unattributed(_)),
    }) {
        Decided::Ready(d) => d,
        Decided::Pending(f) => f.await,
    };
    // nginx replays a 429 from the captured headers, so the problem document travels in one.
    let compact =
        (d.action() == Action::Reject).then(|| rejection_problem(&d, &state.hints).to_bytes());
    let d = match admission(d, &state.gate, &state.hints) {
        Admission::Answer(mut resp) => {
            if let Some(v) = compact.and_then(|c| HeaderValue::from_bytes(&c).ok()) {
                resp.headers_mut().insert(X_LIMITER_PROBLEM, v);
            }
            return resp.map(Body::from);
        }
        Admission::Hold(d, permit) => {
            tokio::time::sleep(d.delay()).await;
            drop(permit);
            d
        }
        Admission::Forward(d) => d,
    };
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    write_headers(&d, resp.headers_mut());
    resp
}
