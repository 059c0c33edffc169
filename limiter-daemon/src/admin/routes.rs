//! The route table: every admin route with its method, its path pattern and an example path.
//! [`router`] is built from [`table`], and [`route_list`] exports the same rows, so a test can
//! walk every route the router serves (a route added without the token check fails it). The
//! one route outside it is the operator page (`GET /admin/`, see [`super::page`]): it holds no
//! data, and every call it makes carries the token.

use axum::middleware;
use axum::routing::{delete, get, post, MethodRouter};
use axum::Router;

use super::auth::require_token;
use super::guard;
use super::handlers::{
    clients, config, crawlers, explain, history, kernel, keys, lists, lockouts, reload, stats,
};
use super::page;
use super::problem::AdminError;
use super::state::AdminState;

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteSpec {
    pub method: &'static str,
    /// The axum pattern (`{ip}` for a path parameter).
    pub path: &'static str,
    /// A concrete path that matches the pattern.
    pub example: &'static str,
}

const fn spec(method: &'static str, path: &'static str, example: &'static str) -> RouteSpec {
    RouteSpec {
        method,
        path,
        example,
    }
}

/// Every route with its handler.
pub fn table() -> Vec<(RouteSpec, MethodRouter<AdminState>)> {
    vec![
        (
            spec(
                "GET",
                "/admin/v1/clients/{ip}",
                "/admin/v1/clients/192.0.2.1",
            ),
            get(clients::show),
        ),
        (
            spec("GET", "/admin/v1/lockouts", "/admin/v1/lockouts"),
            get(lockouts::list),
        ),
        (
            spec("POST", "/admin/v1/lockouts", "/admin/v1/lockouts"),
            post(lockouts::add),
        ),
        (
            spec(
                "DELETE",
                "/admin/v1/lockouts/{ip}",
                "/admin/v1/lockouts/192.0.2.1",
            ),
            delete(lockouts::remove),
        ),
        (
            spec("GET", "/admin/v1/lists/{kind}", "/admin/v1/lists/deny"),
            get(lists::list),
        ),
        (
            spec("POST", "/admin/v1/lists/{kind}", "/admin/v1/lists/deny"),
            post(lists::add),
        ),
        (
            spec(
                "DELETE",
                "/admin/v1/lists/{kind}/{cidr}",
                "/admin/v1/lists/deny/198.51.100.0%2F24",
            ),
            delete(lists::remove),
        ),
        (
            spec("POST", "/admin/v1/keys", "/admin/v1/keys"),
            post(keys::issue),
        ),
        (
            spec("GET", "/admin/v1/keys", "/admin/v1/keys"),
            get(keys::list),
        ),
        (
            spec("GET", "/admin/v1/keys/{id}", "/admin/v1/keys/0000abcd"),
            get(keys::show),
        ),
        (
            spec("DELETE", "/admin/v1/keys/{id}", "/admin/v1/keys/0000abcd"),
            delete(keys::revoke),
        ),
        (
            spec("GET", "/admin/v1/kernel", "/admin/v1/kernel"),
            get(kernel::show),
        ),
        (
            spec("POST", "/admin/v1/explain", "/admin/v1/explain"),
            post(explain::explain),
        ),
        (
            spec("GET", "/admin/v1/config", "/admin/v1/config"),
            get(config::show),
        ),
        (
            spec("POST", "/admin/v1/reload", "/admin/v1/reload"),
            post(reload::reload),
        ),
        (
            spec("GET", "/admin/v1/stats", "/admin/v1/stats"),
            get(stats::show),
        ),
        (
            spec("GET", "/admin/v1/history", "/admin/v1/history"),
            get(history::show),
        ),
        (
            spec("GET", "/admin/v1/crawlers", "/admin/v1/crawlers"),
            get(crawlers::show),
        ),
    ]
}

/// The rows of [`table`] without their handlers.
pub fn route_list() -> Vec<RouteSpec> {
    table().into_iter().map(|(s, _)| s).collect()
}

async fn not_found() -> AdminError {
    AdminError::not_found("path", "no such admin endpoint (see docs/admin-api.md)")
}

/// A known path with a method it does not serve: a problem too, not axum's empty 405.
async fn method_not_allowed() -> AdminError {
    AdminError::new(
        http::StatusCode::METHOD_NOT_ALLOWED,
        Some("method"),
        "this admin endpoint does not serve that method (see docs/admin-api.md)",
    )
}

/// The routes served without the token: the operator page, which holds no data.
pub const PUBLIC: [RouteSpec; 2] = [
    spec("GET", "/admin/", "/admin/"),
    spec("GET", "/admin", "/admin"),
];

/// The admin router: every route of [`table`] and the fallback behind the token check (and in
/// front of it the refusal of other origins), the [`PUBLIC`] page routes beside it, and the
/// marker on every response ([`guard`]).
pub fn router(state: AdminState) -> Router {
    let mut r: Router<AdminState> = Router::new();
    for (s, handler) in table() {
        r = r.route(s.path, handler);
    }
    // The origin check runs first: a page elsewhere learns nothing, not even about the token.
    let protected = r
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), require_token))
        .layer(middleware::from_fn(guard::same_origin_only));
    Router::new()
        .route(PUBLIC[0].path, get(page::page))
        .route(PUBLIC[1].path, get(page::to_page))
        .merge(protected)
        .layer(middleware::map_response(guard::mark))
        .with_state(state)
}
