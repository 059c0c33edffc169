//! The decision API's bearer token (`[http] api_token_file`): when one is set, `/v1/decide` and
//! `/v1/auth` answer only requests with `Authorization: Bearer <token>`; anything else gets a
//! problem+json 401 with `WWW-Authenticate: Bearer`, before any decision is made (so nothing
//! is counted or struck for it). The comparison takes the same time wherever the tokens differ.
//!
//! `Authorization` then belongs to the daemon, yet on `/v1/auth` the caller's own
//! `Authorization` (a JWT) identifies it. nginx therefore passes the caller's in
//! `X-Original-Authorization` (`examples/nginx/limiter-auth.conf`): when that field is present it
//! becomes the request's `Authorization` before the handler runs; when it is absent and a token
//! is configured, the daemon's token is removed, so it is never read as the caller's bearer.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use subtle::ConstantTimeEq;

use crate::config::api_token::ApiToken;
use crate::edge::render::problem::Problem;
use crate::surfaces::api::state::ApiState;

/// Whether `headers` carry `Authorization: Bearer <expected>`.
pub fn authorized(headers: &HeaderMap, expected: &ApiToken) -> bool {
    headers
        .get(AUTHORIZATION)
        .is_some_and(|v| bearer_matches(v.as_bytes(), expected))
}

/// Whether `value`, an `Authorization` field's, is `Bearer <expected>` (scheme in any case).
pub fn bearer_matches(value: &[u8], expected: &ApiToken) -> bool {
    match value.split_at_checked(7) {
        Some((scheme, given)) if scheme.eq_ignore_ascii_case(b"bearer ") => {
            token_matches(given, expected)
        }
        _ => false,
    }
}

/// Whether `given` (surrounding blanks aside) is the token, compared in constant time.
pub fn token_matches(given: &[u8], expected: &ApiToken) -> bool {
    // `ct_eq` on slices of different lengths is false without comparing; the length of a
    // token is no secret worth hiding (it is fixed by whoever generated it).
    bool::from(given.trim_ascii().ct_eq(expected.expose()))
}

fn unauthorized(detail: &str) -> http::Response<Bytes> {
    let mut resp = Problem::new(StatusCode::UNAUTHORIZED, None, detail).into_response();
    resp.headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    resp
}

/// The caller's own `Authorization`, passed by nginx beside the daemon's token.
pub const X_ORIGINAL_AUTHORIZATION: HeaderName =
    HeaderName::from_static("x-original-authorization");

/// Lets a request with `headers` through (the daemon's token taken out of them, the caller's
/// own put in) when no token is configured or they carry it; else the 401 (boxed: rare).
pub fn admit(state: &ApiState, headers: &mut HeaderMap) -> Result<(), Box<http::Response<Bytes>>> {
    if let Some(token) = &state.token {
        if !authorized(headers, token) {
            let detail = if headers.contains_key(AUTHORIZATION) {
                "The bearer token is not the one configured ([http] api_token_file)."
            } else {
                "This endpoint needs `Authorization: Bearer <token>` ([http] api_token_file)."
            };
            return Err(Box::new(unauthorized(detail)));
        }
        headers.remove(AUTHORIZATION);
    }
    if let Some(caller) = headers.remove(X_ORIGINAL_AUTHORIZATION) {
        headers.insert(AUTHORIZATION, caller);
    }
    Ok(())
}

/// The router's layer: [`admit`] on every route.
pub async fn require_token(
    State(state): State<ApiState>,
    mut req: Request,
    next: Next,
) -> Response {
    match admit(&state, req.headers_mut()) {
        Ok(()) => next.run(req).await,
        Err(resp) => (*resp).map(axum::body::Body::from).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_passes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, "s3cret-token-0123456789\n").unwrap();
        let t = ApiToken::read(&p).unwrap();
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            authorized(&h, &t)
        };
        assert!(with("Bearer s3cret-token-0123456789"));
        assert!(with("bearer s3cret-token-0123456789"));
        assert!(!with("Bearer s3cret-token-012345678"));
        assert!(!with("Bearer s3cret-token-01234567890"));
        assert!(!with("Basic s3cret-token-0123456789"));
        assert!(!with("Bearer"));
        assert!(!authorized(&HeaderMap::new(), &t));
    }
}
