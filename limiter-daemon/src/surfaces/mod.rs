//! The decision surfaces: a front end asks, the daemon answers, nothing is forwarded.
//!
//! - [`api`]: the decision API (`POST /v1/decide`) and forward auth (`GET /v1/auth`, in the
//!   nginx, Caddy, Traefik and Envoy conventions) behind one router.
//! - [`grpc`]: Envoy's gRPC services (ext_authz `Check`, `ShouldRateLimit`) on
//!   `[http] grpc_listen`, deciding as the API does.
//!
//! Both run the steps of [`crate::edge::steps`] and import nothing of the proxy's.

pub mod api;
pub mod grpc;
