//! Metrics on the binary, the HTTP server and the kernel; the memory bound.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "../http_support/mod.rs"]
mod http_support;
#[path = "../kernel_support/mod.rs"]
mod kernel_support;

mod metrics_daemon;
mod metrics_http;
mod metrics_kernel;
