//! `[http] api_token_file` on the gRPC services: when a token is set every call must carry it
//! in its metadata, as `authorization: Bearer <token>` (Envoy's `grpc_service`
//! `initial_metadata`) or `x-limiter-token: <token>`; anything else is `UNAUTHENTICATED`
//! before the request is read, so nothing is counted or struck for it. The comparison is the
//! HTTP API's ([`crate::surfaces::api::token`]), in constant time.
//!
//! The caller's own `Authorization` (a JWT) travels inside the message (`Check`'s headers, a
//! descriptor entry), never in this metadata, so the two cannot be confused.

use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::config::api_token::ApiToken;
use crate::surfaces::api::token::{bearer_matches, token_matches};

/// The metadata key that carries the bare token.
pub const X_LIMITER_TOKEN: &str = "x-limiter-token";

/// Checks each call's metadata for the token; passes everything when none is configured.
#[derive(Clone, Debug)]
pub struct TokenCheck(pub Option<ApiToken>);

impl Interceptor for TokenCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(token) = &self.0 else {
            return Ok(request);
        };
        let m = request.metadata();
        let bearer = m
            .get("authorization")
            .is_some_and(|v| bearer_matches(v.as_bytes(), token));
        let bare = m
            .get(X_LIMITER_TOKEN)
            .is_some_and(|v| token_matches(v.as_bytes(), token));
        if bearer || bare {
            return Ok(request);
        }
        let detail = if m.contains_key("authorization") || m.contains_key(X_LIMITER_TOKEN) {
            "the token is not the one configured ([http] api_token_file)"
        } else {
            "this service needs the token ([http] api_token_file) as gRPC metadata \
             `authorization: Bearer <token>` or `x-limiter-token: <token>`"
        };
        Err(Status::unauthenticated(detail))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_metadata_key_carries_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, "s3cret-token-0123456789\n").unwrap();
        let mut check = TokenCheck(Some(ApiToken::read(&p).unwrap()));
        let with = |k: &'static str, v: &str| {
            let mut r = Request::new(());
            r.metadata_mut().insert(k, v.parse().unwrap());
            r
        };
        assert!(check
            .call(with("authorization", "Bearer s3cret-token-0123456789"))
            .is_ok());
        assert!(check
            .call(with(X_LIMITER_TOKEN, "s3cret-token-0123456789"))
            .is_ok());
        let wrong = check
            .call(with("authorization", "Bearer nope"))
            .unwrap_err();
        assert_eq!(wrong.code(), tonic::Code::Unauthenticated);
        assert!(wrong.message().contains("not the one"), "{wrong:?}");
        let none = check.call(Request::new(())).unwrap_err();
        assert!(none.message().contains("x-limiter-token"), "{none:?}");
        assert!(TokenCheck(None).call(Request::new(())).is_ok());
    }
}
