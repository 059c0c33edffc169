//! The API's access log lines ([`crate::edge::access_log`]): a middleware on the router starts a
//! line for every request (a refused token and a malformed body included) and finishes it with
//! the status and body bytes; a handler that decided marks its response with [`Described`]:
//! the request it decided on (client, method, host, path) and the verdict, which the line then
//! shows instead of the API call itself.
//!
//! For `/v1/decide` the line's status is the one the caller is told to answer: 429 for a
//! reject (the answer's own status is 200), so a `combined` log reads as the app's would.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http::Method;
use hyper::body::Body as _;

use crate::edge::access_log::handle::{agent_and_host, UNKNOWN};
use crate::edge::access_log::record::{Record, Seen};
use crate::edge::access_log::{Surface, Verdict};
use crate::model::{Action, Decision};
use crate::surfaces::api::auth_convention::X_FORWARDED_HOST;
use crate::surfaces::api::state::ApiState;

/// The request a handler decided on, carried in its response's extensions.
#[derive(Clone, Debug)]
pub struct Described {
    pub client: IpAddr,
    pub method: Method,
    /// The original request's host, when the front end named it.
    pub host: Option<Vec<u8>>,
    pub path: String,
    pub verdict: Verdict,
}

/// `resp`, marked with what was decided on `client`'s `method` `path` (with the log on).
pub fn described<B>(
    state: &ApiState,
    mut resp: http::Response<B>,
    client: IpAddr,
    method: &Method,
    host: Option<&[u8]>,
    path: &str,
    d: &Decision,
) -> http::Response<B> {
    if state.steps.access_log.is_on() {
        resp.extensions_mut().insert(Described {
            client,
            method: method.clone(),
            host: host.map(<[u8]>::to_vec),
            path: path.to_string(),
            verdict: Verdict::of(d),
        });
    }
    resp
}

/// The original request's host in a forward-auth request's `headers` (Caddy and Traefik name
/// it in `X-Forwarded-Host`; nginx passes the original `Host`), with the log on.
pub fn host_of(state: &ApiState, headers: &http::HeaderMap) -> Option<Vec<u8>> {
    if !state.steps.access_log.is_on() {
        return None;
    }
    headers
        .get(X_FORWARDED_HOST)
        .or_else(|| headers.get(http::header::HOST))
        .map(|v| v.as_bytes().to_vec())
}

/// Starts the line of a request from `peer` (`None` with the log off).
pub fn start(state: &ApiState, peer: IpAddr, parts: &http::request::Parts) -> Option<Box<Record>> {
    let path = parts.uri.path();
    let surface = if path == "/v1/decide" {
        Surface::Decide
    } else {
        Surface::Auth
    };
    let (user_agent, host) = agent_and_host(&parts.headers);
    state.steps.access_log.start(&Seen {
        surface,
        peer,
        client: peer,
        method: &parts.method,
        version: parts.version,
        host,
        path,
        user_agent,
    })
}

/// Finishes `line` with `resp` (its status, its `bytes` of body, what its handler described).
pub fn finish<B>(
    state: &ApiState,
    mut line: Option<Box<Record>>,
    resp: &http::Response<B>,
    bytes: u64,
) {
    let mut status = resp.status().as_u16();
    if let (Some(l), Some(d)) = (&mut line, resp.extensions().get::<Described>()) {
        l.describe(d.client, &d.method, d.host.as_deref(), &d.path);
        if l.surface == Surface::Decide && d.verdict.action == Action::Reject && status == 200 {
            status = 429;
        }
        l.verdict = Some(d.verdict.clone());
    }
    state.steps.access_log.finish(line, status, bytes);
}

/// The middleware: one line per API request.
pub async fn log(State(state): State<ApiState>, req: Request, next: Next) -> Response {
    if !state.steps.access_log.is_on() {
        return next.run(req).await;
    }
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(UNKNOWN, |c| c.0.ip());
    let (parts, body) = req.into_parts();
    let line = start(&state, peer, &parts);
    let resp = next.run(Request::from_parts(parts, body)).await;
    let bytes = resp.body().size_hint().exact().unwrap_or(0);
    finish(&state, line, &resp, bytes);
    resp
}
