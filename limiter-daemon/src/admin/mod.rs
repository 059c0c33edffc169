//! The admin API: the operator's HTTP surface on its own listener (`[admin] listen`), every
//! route behind a bearer token. It reads and changes what the engine manages (clients,
//! lockouts, allow/deny lists, keys), reports the kernel, explains decisions, shows the
//! effective config with secrets redacted, and triggers a reload through a hook the app wires.
//!
//! - [`token`]: where the token comes from (file, environment, or generated at first start).
//! - [`auth`]: the bearer check, constant time, on every route and the fallback.
//! - [`problem`]: the one error type, rendered as problem+json with a `field` member.
//! - [`body`]: JSON request bodies (content type, size, syntax, fields) checked before a handler.
//! - [`path`]: path parameters, a bad one a problem naming it (not axum's text/plain 400).
//! - [`guard`]: the marker on every response, and no request from a browser on another origin.
//! - [`routes`]: the route table (exported, so tests can prove every route needs the token).
//! - [`handlers`]: one file per resource.
//! - [`talkers`]: the last five minutes per caller (top talkers, tier mix) for the stats
//!   endpoint, fed with every decision through the metrics' decider wrapper.
//! - [`page`]: the operator page at `/admin/`, one HTML file built into the binary.
//! - [`server`]: bind and serve until the app's shutdown.

pub mod auth;
pub mod body;
pub mod guard;
pub mod handlers;
pub mod page;
pub mod path;
pub mod problem;
pub mod routes;
pub mod server;
pub mod state;
pub mod talkers;
pub mod token;

pub use problem::AdminError;
pub use routes::{route_list, router, RouteSpec};
pub use server::AdminServer;
pub use state::{AdminState, ReloadFn};
