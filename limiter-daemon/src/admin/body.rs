//! JSON request bodies: the content type must be JSON (415), the body at most [`MAX_BODY`]
//! bytes (413), the text JSON (400), and each field the right shape; a field error names the
//! field by its path (`serde_path_to_error`; a missing or unknown field by its own name), unknown
//! fields are refused.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use http::StatusCode;
use serde::de::DeserializeOwned;

use super::problem::AdminError;
use crate::config::field_path::field_of;
use crate::surfaces::api::browser::json_content_type;

/// Largest request body accepted (the biggest legitimate one, an explain with its headers,
/// stays far below).
pub const MAX_BODY: usize = 64 * 1024;

/// A deserialized JSON body.
pub struct JsonBody<T>(pub T);

/// Parses `bytes` as `T`, naming the field at fault.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, AdminError> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| AdminError::bad("body", format!("the body is not JSON: {e}")))?;
    if !value.is_object() {
        return Err(AdminError::bad("body", "the body must be a JSON object"));
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // An unknown or a missing field is reported at the object's level; name the field.
        let field = field_of(&path, &inner).unwrap_or_else(|| "body".to_string());
        AdminError::bad(&field, inner)
    })
}

/// A JSON body's bytes, content type and size checked, syntax left to the handler's parser.
pub struct RawJson(pub Bytes);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = AdminError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let RawJson(bytes) = RawJson::from_request(req, state).await?;
        parse(&bytes).map(JsonBody)
    }
}

impl<S: Send + Sync> FromRequest<S> for RawJson {
    type Rejection = AdminError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        // The decision API's rule: a browser sends JSON across origins only after a preflight.
        let (json, ct) = json_content_type(req.headers());
        if !json {
            return Err(AdminError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Some("Content-Type"),
                format!("send `Content-Type: application/json` (got {ct:?})"),
            ));
        }
        let bytes = axum::body::to_bytes(Body::new(req.into_body()), MAX_BODY)
            .await
            .map_err(|_| {
                AdminError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    Some("body"),
                    format!("the body is larger than {MAX_BODY} bytes"),
                )
            })?;
        Ok(RawJson(bytes))
    }
}
