//! The admin API's one error: a status, a title, a detail for the operator, and the `field`
//! at fault, rendered as `application/problem+json`. Client mistakes are 4xx naming the field;
//! a failure inside (the store, the kernel) is a 500 whose cause is logged once, never sent.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::json;

use crate::engine::EngineError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminError {
    pub status: StatusCode,
    pub detail: String,
    pub field: Option<String>,
    /// Extra members (the reload refusal's `line`).
    pub line: Option<usize>,
}

impl AdminError {
    pub fn new(status: StatusCode, field: Option<&str>, detail: impl Into<String>) -> Self {
        AdminError {
            status,
            detail: detail.into(),
            field: field.map(str::to_string),
            line: None,
        }
    }

    /// 400: a value that does not parse.
    pub fn bad(field: &str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, Some(field), detail)
    }

    /// 422: a value that parses but cannot be used.
    pub fn unprocessable(field: &str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, Some(field), detail)
    }

    pub fn not_found(field: &str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, Some(field), detail)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            Some("Authorization"),
            "send `Authorization: Bearer <admin token>` (see [admin] token_file, \
             LIMITER_ADMIN_TOKEN or <state_dir>/admin-token)",
        )
    }

    /// A failure that is not the caller's: logged here with its chain, answered without it.
    pub fn internal(what: &str, err: &(dyn std::error::Error + 'static)) -> Self {
        let mut chain = err.to_string();
        let mut src = err.source();
        while let Some(s) = src {
            chain.push_str(": ");
            chain.push_str(&s.to_string());
            src = s.source();
        }
        tracing::error!(error = %chain, "admin API: {what} failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            format!("{what} failed; the daemon's log has the cause"),
        )
    }

    /// Maps an engine error: input mistakes keep their field, the store's failures are 500.
    pub fn engine(err: EngineError, field: &str) -> Self {
        match err {
            EngineError::Store(ref e) => Self::internal("the store operation", e),
            EngineError::NoFreeKeyId => Self::internal("finding a free key id", &err),
            EngineError::ZeroHourlyLimit => Self::unprocessable("hourlyLimit", err.to_string()),
            EngineError::ZeroDuration => Self::unprocessable("for", err.to_string()),
            EngineError::BadKeyId { .. } => Self::bad("id", err.to_string()),
            EngineError::LockPrefixTooWide(_)
            | EngineError::TrustedProxy { .. }
            | EngineError::AsnTooWide { .. } => Self::unprocessable(field, err.to_string()),
            EngineError::AsnUnknown { .. } => Self::not_found(field, err.to_string()),
        }
    }
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let title = self
            .status
            .canonical_reason()
            .unwrap_or("Error")
            .to_string();
        let mut body = json!({
            "type": "about:blank",
            "title": title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        if let Some(f) = &self.field {
            body["field"] = json!(f);
        }
        if let Some(l) = self.line {
            body["line"] = json!(l);
        }
        (
            self.status,
            [(http::header::CONTENT_TYPE, "application/problem+json")],
            body.to_string(),
        )
            .into_response()
    }
}
