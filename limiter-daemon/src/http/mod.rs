//! The HTTP surfaces, one decision engine behind all three:
//!
//! - [`front`]: each proxy connection starts here; bodyless HTTP/1.1 requests are served by
//!   its own loop, anything else is handed to hyper's server and [`proxy`]'s handler. Both
//!   forward through the pooled [`upstream`] client (bodyless requests on its
//!   [`upstream_direct`] path, with [`chunked`] decoding; [`upstream_pool`] caps and keeps the
//!   connections), with [`hop`] header hygiene and
//!   [`limits`] on request heads.
//! - [`decide_api`]: `POST /v1/decide` for apps and gateways that enforce themselves; its body
//!   is read within bounds by [`decide_body`].
//! - [`auth_request`]: `GET /v1/auth` for nginx `auth_request`.
//! - [`response`]: how a [`crate::model::Decision`] becomes headers and a 429
//!   problem document; [`problem`] renders every error body as `application/problem+json`.
//! - [`hold`]: bounds on requests held for a scan delay; [`held`]: a held request's wait on
//!   the client's connection, keeping only what it needs.
//! - [`sched`]: the proxy threads' scheduling policy (`SCHED_BATCH` by default).
//! - [`server`]: binds the configured listeners and serves until a shutdown future resolves.
//! - [`decider`]: the trait the surfaces call, implemented by the engine.

pub mod api;
pub mod auth_request;
pub mod body;
pub mod chunked;
pub mod decide_api;
pub mod decide_body;
pub mod decider;
pub mod front;
pub mod held;
pub mod hold;
pub mod hop;
pub mod limits;
pub mod problem;
pub mod proxy;
pub mod request_body;
pub mod request_rules;
pub mod response;
pub mod sched;
pub mod server;
pub mod upstream;
pub mod upstream_direct;
pub mod upstream_pool;

pub use decider::{Decider, RequestView};
