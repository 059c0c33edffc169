//! Path parameters (`/admin/v1/lockouts/{ip}`) read through axum's `Path`, its rejection turned
//! into the admin API's problem+json naming the parameter. axum's own rejection is a
//! `text/plain` 400: `/admin/v1/lockouts/%ff` (an escape that does not decode to UTF-8) got one,
//! while every other admin error is problem+json.

use axum::extract::path::ErrorKind;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequestParts, Path};
use http::request::Parts;
use serde::de::DeserializeOwned;

use super::problem::AdminError;

/// A route's path parameters, deserialized as `T` (a `String`, or a tuple for several).
pub struct AdminPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for AdminPath<T> {
    type Rejection = AdminError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(AdminPath(v)),
            Err(rejection) => Err(problem(&rejection)),
        }
    }
}

/// The problem for `rejection`: the parameter named when axum knows it.
fn problem(rejection: &PathRejection) -> AdminError {
    let PathRejection::FailedToDeserializePathParams(e) = rejection else {
        // Missing parameters mean a route and its handler disagree: not the caller's mistake.
        return AdminError::internal("reading the path parameters", rejection);
    };
    match e.kind() {
        ErrorKind::InvalidUtf8InPathParam { key } => AdminError::bad(
            key,
            format!("the path parameter `{key}` is not UTF-8 text once its %-escapes are decoded"),
        ),
        ErrorKind::ParseErrorAtKey { key, .. } | ErrorKind::DeserializeError { key, .. } => {
            AdminError::bad(key, e.body_text())
        }
        _ if e.status().is_server_error() => {
            AdminError::internal("reading the path parameters", rejection)
        }
        _ => AdminError::bad("path", e.body_text()),
    }
}
