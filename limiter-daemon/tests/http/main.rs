//! The daemon's HTTP server in-process: proxy fidelity, the API, holds, scheduling, nginx.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "../http_support/mod.rs"]
mod http_support;

mod http_api;
mod http_differential;
mod http_engine;
mod http_front;
mod http_hold;
mod http_nginx;
mod http_proxy;
mod http_upstream_cap;
