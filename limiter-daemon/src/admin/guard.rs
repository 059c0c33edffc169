//! The two layers around the admin router besides the token: every response carries the
//! marker its clients recognise it by ([`crate::model::admin_marker`]), and a request that a
//! browser sent from another origin is refused (403) before the token is even looked at, by
//! the rule the decision API follows too ([`crate::surfaces::api::browser`]). The operator page
//! calls its own origin, so its requests pass.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderName, HeaderValue, StatusCode};

use super::problem::AdminError;
use crate::model::admin_marker::{MARKER, MARKER_VALUE};
use crate::surfaces::api::browser::cross_site;

/// Puts the marker on `resp`.
pub async fn mark(mut resp: Response) -> Response {
    resp.headers_mut().insert(
        HeaderName::from_static(MARKER),
        HeaderValue::from_static(MARKER_VALUE),
    );
    resp
}

/// Refuses a browser's request from another origin, naming the field that shows it.
pub async fn same_origin_only(req: Request, next: Next) -> Response {
    match cross_site(req.headers(), req.uri()) {
        None => next.run(req).await,
        Some(c) => AdminError::new(StatusCode::FORBIDDEN, Some(c.field), c.detail).into_response(),
    }
}
