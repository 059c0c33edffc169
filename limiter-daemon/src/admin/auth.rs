//! The bearer check in front of every admin route (and the fallback, so probing unknown paths
//! without a token learns nothing). The presented token and the configured one are both hashed
//! and the digests compared with `subtle`: equal-length inputs, constant time, so neither the
//! length nor a prefix of the token leaks through timing.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use http::HeaderValue;
use subtle::ConstantTimeEq;

use super::problem::AdminError;
use super::state::{digest, AdminState};

/// `true` when `header` is `Bearer <token>` with the configured token.
pub fn authorized(state: &AdminState, header: Option<&HeaderValue>) -> bool {
    let Some(presented) = header
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
    else {
        return false;
    };
    bool::from(digest(presented.as_bytes()).ct_eq(&state.token_digest))
}

pub async fn require_token(State(state): State<AdminState>, req: Request, next: Next) -> Response {
    if authorized(&state, req.headers().get(AUTHORIZATION)) {
        return next.run(req).await;
    }
    let mut resp = AdminError::unauthorized().into_response();
    resp.headers_mut().insert(
        WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"limiter-admin\""),
    );
    resp
}
