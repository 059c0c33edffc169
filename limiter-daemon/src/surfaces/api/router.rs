//! The API listener's router: `POST /v1/decide` and `/v1/auth` (with Envoy's `/v1/auth/envoy/…`), sharing one [`ApiState`],
//! behind the bearer token when one is configured ([`crate::surfaces::api::token`]).

use axum::extract::DefaultBodyLimit;
use axum::routing::{any, post};
use axum::Router;

use crate::surfaces::api::auth_convention::ENVOY_PREFIX;
use crate::surfaces::api::auth_request::auth;
use crate::surfaces::api::state::ApiState;

pub fn router(state: ApiState) -> Router {
    // axum's default (2 MiB) let 16 concurrent bodies take the daemon from 33 to 268 MB.
    let body_limit = DefaultBodyLimit::max(state.limits.max_body);
    let routes = Router::new()
        .route(
            "/v1/decide",
            post(crate::surfaces::api::decide::decide).layer(body_limit),
        )
        // Any method: Envoy's ext_authz asks with the original request's own, under its prefix.
        .route("/v1/auth", any(auth))
        .route(ENVOY_PREFIX, any(auth))
        .route(&format!("{ENVOY_PREFIX}/{{*original}}"), any(auth))
        // On every route, so a route added later is covered too.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::surfaces::api::token::require_token,
        ));
    // Outside the token check: a refused caller is logged too. Only when the log is on: a
    // layer costs every call a boxed future and a clone of the state.
    let routes = if state.steps.access_log.is_on() {
        routes.layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::surfaces::api::access::log,
        ))
    } else {
        routes
    };
    routes.with_state(state)
}
