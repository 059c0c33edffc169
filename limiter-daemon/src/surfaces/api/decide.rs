//! `POST /v1/decide`: the decision for a described request, for apps and gateways that enforce
//! it themselves. Nothing is held here: a delay comes back as `delayMs` for the caller to apply.
//!
//! Request: `{"ip": "203.0.113.7", "method": "GET", "path": "/api/search?q=x",
//! "headers": {"cookie": "session=…"}}` (`method` defaults to GET, `headers` to none; a header
//! value may be a string or a list of strings).
//! Answer: `{"action", "tier", "reason", "delayMs", "retryAfter", "headers"}` plus, for a
//! reject, `problem`: the 429 body the caller should send, and for a `network` reject `network`:
//! the network over its budget. In shadow mode the action is `allow`
//! and `shadow` says what enforcing would have done: `{"action", "reason", "delayMs"}`. Malformed input → 400 naming the field;
//! more header values or bytes than `[http] max_header_count` / `max_header_bytes` → 431; a body
//! over `[http] api_max_body` → 413 (the body is parsed in [`crate::surfaces::api::decide_body`]).
//! A body not sent as `application/json` → 415, and a browser's request from another origin →
//! 403, both naming the field ([`crate::surfaces::api::browser`]): a page must not strike addresses.

use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, StatusCode, Uri};
use serde_json::{json, Map, Value};

use crate::edge::render::problem;
use crate::edge::render::response::{problem as rejection_problem, retry_after, write_headers};
use crate::engine::decider::RequestView;
use crate::model::Action;
use crate::surfaces::api::access;
use crate::surfaces::api::browser::{cross_site, json_content_type};
use crate::surfaces::api::decide_body::{parse, DescribeError};
use crate::surfaces::api::state::ApiState;

/// The answer to a body that could not be read: 413 past `api_max_body` (axum stops reading
/// there, so an oversized body is never buffered whole), else 400.
fn unreadable(rejection: &BytesRejection, max_body: usize) -> Response {
    let p = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        problem::Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
            format!(
                "Body is over the {max_body} bytes accepted; describe the request with fewer or \
                 smaller headers."
            ),
        )
    } else {
        problem::Problem::new(
            StatusCode::BAD_REQUEST,
            None,
            format!("Body could not be read: {}", rejection.body_text()),
        )
    };
    p.into_response().map(axum::body::Body::from)
}

fn malformed(err: &DescribeError) -> Response {
    let status = if err.is_header_limit() {
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    } else {
        StatusCode::BAD_REQUEST
    };
    let mut p = problem::Problem::new(status, None, err.to_string());
    if let Some(field) = err.field() {
        p = p.with("field", field);
    }
    p.into_response().map(axum::body::Body::from)
}

/// A request no browser page may make: 403 from another origin, 415 without a JSON body (see
/// [`crate::surfaces::api::browser`]). Checked before the body is read.
fn browser_refusal(headers: &HeaderMap, uri: &Uri) -> Option<Response> {
    let p = if let Some(c) = cross_site(headers, uri) {
        problem::Problem::new(StatusCode::FORBIDDEN, None, c.detail)
            .with("field", c.field.to_ascii_lowercase())
    } else {
        let (json, ct) = json_content_type(headers);
        if json {
            return None;
        }
        problem::Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            format!("Send the body with `Content-Type: application/json` (got {ct:?})."),
        )
        .with("field", "content-type")
    };
    Some(p.into_response().map(axum::body::Body::from))
}

pub async fn decide(
    State(state): State<ApiState>,
    request_headers: HeaderMap,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if let Some(refused) = browser_refusal(&request_headers, &uri) {
        return refused;
    }
    drop(request_headers);
    let body = match body {
        Ok(b) => b,
        Err(rejection) => return unreadable(&rejection, state.limits.max_body),
    };
    let described = match parse(&body, state.limits.headers) {
        Ok(d) => d,
        Err(err) => return malformed(&err),
    };
    // Headers are copied into the map; the body's buffer is not needed any more.
    drop(body);
    let view = RequestView {
        client: state.steps.resolve(described.ip, &described.headers),
        method: &described.method,
        path: &described.path,
        headers: &described.headers,
    };
    let d = state.steps.decide(&view, None).await;
    let mut h = HeaderMap::new();
    write_headers(&d, &mut h);
    let headers: Map<String, Value> = h
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                Value::String(String::from_utf8_lossy(v.as_bytes()).into_owned()),
            )
        })
        .collect();
    let rejected = d.action() == Action::Reject;
    let mut out = json!({
        "action": d.action().as_str(),
        "tier": d.tier.as_str(),
        "reason": d.reason().map(|r| r.as_str()),
        "delayMs": u64::try_from(d.delay().as_millis()).unwrap_or(u64::MAX),
        "retryAfter": if rejected { Some(retry_after(&d)) } else { None },
        "headers": headers,
    });
    if rejected {
        out["problem"] = rejection_problem(&d, &state.steps.hints).to_value();
    }
    if let (Some(crate::model::Reason::Network), Some(n)) = (d.reason(), &d.network) {
        out["network"] = Value::String(n.name.to_string());
    }
    if let Some(s) = d.shadowed() {
        out["shadow"] = json!({
            "action": s.action().as_str(),
            "reason": s.reason().map(|r| r.as_str()),
            "delayMs": u64::try_from(s.delay().as_millis()).unwrap_or(u64::MAX),
        });
    }
    let host = described
        .headers
        .get(http::header::HOST)
        .map(|h| h.as_bytes());
    let (ip, method, path) = (described.ip, &described.method, &described.path);
    access::described(
        &state,
        axum::Json(out).into_response(),
        ip,
        method,
        host,
        path,
        &d,
    )
}
