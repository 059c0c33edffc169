//! The self-service endpoint: `GET /.well-known/rate-limits` (`[http] self_service_path`) on
//! the proxy, answered by the daemon, never forwarded and never counted. It tells the caller
//! its own tier, each window's limit, what is left and when it resets, any lockout, and the
//! upgrade sentence, so an agent can pace itself before it is refused.
//!
//! It sits in the admission step both proxy paths share ([`super::hyper::admit`]), so the own
//! loop and hyper's server answer it alike. Other methods on the path get a 405, not the
//! upstream: the path belongs to the daemon.
//!
//! ```json
//! {"tier": "anon", "next": "allow", "lockout": null, "upgrade": "Sign in …",
//!  "windows": [{"name": "burst", "limit": 120, "remaining": 117, "windowSecs": 60, "resetSecs": 52}]}
//! ```
//! `remaining` is what may still be sent now (the last decision's rate-limit fields said the
//! same); `next` is what the next request on this path would get.

use bytes::Bytes;
use http::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Method, Response, StatusCode};
use serde_json::json;

use crate::edge::render::problem::Problem;
use crate::engine::decider::{Decider, RequestView};
use crate::engine::standing::Standing;

/// The answer for `view` when it asks for the self-service path `path`; `None` for any other
/// request (or a decider that cannot tell a standing).
pub fn answer(
    path: Option<&str>,
    decider: &dyn Decider,
    view: &RequestView<'_>,
) -> Option<Response<Bytes>> {
    if Some(view.path) != path {
        return None;
    }
    if view.method != Method::GET && view.method != Method::HEAD {
        let mut resp = Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            None,
            "This path tells callers their own rate limits: use GET.",
        )
        .into_response();
        resp.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Some(resp);
    }
    decider.standing(view).map(|s| render(&s))
}

/// The JSON document for `s`.
pub fn render(s: &Standing) -> Response<Bytes> {
    let windows: Vec<_> = s
        .windows
        .iter()
        .map(|w| {
            json!({
                "name": w.kind.as_str(),
                "limit": w.limit,
                "remaining": w.remaining,
                "windowSecs": w.window_secs,
                "resetSecs": w.reset_secs,
            })
        })
        .collect();
    let body = json!({
        "tier": s.next.tier.as_str(),
        "windows": windows,
        "next": s.next.action().as_str(),
        "lockout": s.locked_secs.map(|secs| json!({ "retryAfter": secs })),
        "upgrade": s.next.upgrade.as_deref(),
    });
    let mut resp = Response::new(Bytes::from(body.to_string()));
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    // Each answer is the caller's own and of this moment.
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}
