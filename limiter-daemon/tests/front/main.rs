//! Fronts in front of the daemon: Caddy, HAProxy, Envoy gRPC, documented configs, PROXY lockout.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "../http_support/mod.rs"]
mod http_support;
#[path = "../kernel_support/mod.rs"]
mod kernel_support;
mod rig;

mod front_caddy;
mod front_documented;
mod front_grpc;
mod front_haproxy;
mod front_proxy_lockout;
