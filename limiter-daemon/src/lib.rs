//! The limiter daemon as a library: the binary in `main.rs` only parses arguments and calls in.
//!
//! - [`kernel`]: loads, attaches, pins and drives the XDP/TC dataplane.
//! - [`config`]: the TOML file and environment overrides, validated in two stages.
//! - [`identity`]: who a request comes from (client IP, session cookie, JWT, API key).
//! - [`engine`]: the tier ladder, budgets, scan delays, strikes and lockouts.
//! - [`store`]: where counters, keys and lockouts live (embedded by default).
//! - [`daemon`]: `run` wiring: config → kernel → store → engine → HTTP until a signal.
//! - [`http`]: reverse proxy, decision API and nginx `auth_request` surfaces.
//! - [`metrics`]: Prometheus metrics, `/healthz` and `/readyz` on the operator listener.
//! - [`clock`]: injected time, so every window and lockout is tested without sleeping.

pub mod cli;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod engine;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz_entry;
pub mod http;
pub mod identity;
pub mod kernel;
pub mod metrics;
pub mod store;
