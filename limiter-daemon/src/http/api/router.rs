//! The API listener's router: `POST /v1/decide` and `GET /v1/auth`, sharing one [`ApiState`].

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

use crate::http::api::state::ApiState;

pub fn router(state: ApiState) -> Router {
    // axum's default (2 MiB) let 16 concurrent bodies take the daemon from 33 to 268 MB.
    let body_limit = DefaultBodyLimit::max(state.limits.max_body);
    Router::new()
        .route(
            "/v1/decide",
            post(crate::http::api::decide::decide).layer(body_limit),
        )
        .route("/v1/auth", get(crate::http::api::auth_request::auth))
        .with_state(state)
}
