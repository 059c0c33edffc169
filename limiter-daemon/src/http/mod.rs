//! The HTTP surfaces, one decision engine behind all three, in four rooms and a shared floor:
//!
//! - [`h1`]: HTTP/1 wire code on bytes, used by both of the proxy's loops and its upstream
//!   client: chunked decoding, message framing, hop-by-hop hygiene.
//! - [`proxy`]: the reverse proxy: its workers and listeners ([`proxy::server`]), its own
//!   HTTP/1.1 loop ([`proxy::front`]), hyper's server for the rest ([`proxy::hyper`]), the
//!   admission step both share (decide, then forward, hold or answer), held requests and
//!   their bounds, the request rules every path applies.
//! - [`upstream`]: the pooled client to the upstream: the connection cap and pool, the
//!   direct exchange for bodyless requests, hyper's client for the rest.
//! - [`api`]: the decision API (`POST /v1/decide`) and nginx `auth_request` (`GET /v1/auth`)
//!   behind one router.
//! - [`grpc`]: Envoy's gRPC services (ext_authz `Check`, `ShouldRateLimit`) on
//!   `[http] grpc_listen`, deciding as the API does.
//! - [`listen`]: how the API, admin and metrics routers are served: HTTP/1.1 with a head-read
//!   (and idle) timeout, a body-read timeout and a connection cap on every listener.
//! - [`render`]: how a decision becomes rate-limit fields and a 429, and every error body as
//!   `application/problem+json`.
//! - [`access_log`]: one line per request answered, from every surface.
//! - [`steps`]: a request's phases (resolve the client, decide, hold, forward, render, log),
//!   written once: every surface above runs them.
//! - [`overload`]: the ladder under overload: requests in flight to the upstream, their
//!   limit, and which tier is shed first.
//!
//! Every surface asks [`crate::engine::decider::Decider`] for its decisions.

pub mod access_log;
pub mod api;
pub mod grpc;
pub mod h1;
pub mod listen;
pub mod overload;
pub mod proxy;
pub mod render;
pub mod steps;
pub mod tls;
pub mod upstream;

pub use crate::engine::decider::{Decider, RequestView};
