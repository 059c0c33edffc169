//! The limiter daemon as a library: the binary in `main.rs` only parses arguments and calls in.
//! Layers, bottom-up (each imports only from those below; see `docs/architecture.md`):
//!
//! - [`model`]: the shared vocabulary (tiers, the windows table, decisions, store records).
//! - [`clock`]: injected time, so every window and lockout is tested without sleeping.
//! - [`owned_thread`]: a background thread stopped and joined when its owner drops.
//! - [`config`]: the TOML file and environment overrides, validated in two stages.
//! - [`identity`]: who a request comes from (client IP, session cookie, JWT, API key).
//! - [`store`]: the counting rules (windows, one check-and-count, leases) and the store traits.
//! - [`embedded`]: the in-process store (the default), persisted in `state_dir`.
//! - [`valkey`]: the same traits on Valkey, shared by a fleet.
//! - [`fleet`]: a fleet's request path on Valkey (leases, breaker, lockout replica) and opening
//!   the configured store.
//! - [`fetch`]: what is fetched from outside (crawler proof sources, agents' directories) and
//!   the HTTPS client that fetches it.
//! - [`engine`]: the tier ladder, budgets, scan delays, strikes and lockouts; the `Decider` seam.
//! - [`kernel`]: loads, attaches, pins and drives the XDP/TC dataplane.
//! - [`edge`]: the listener runtime and what every HTTP surface shares (a request's steps,
//!   head limits, HTTP/1 wire code, rendering, the access log).
//! - [`surfaces`]: the decision API, forward auth and Envoy's gRPC services.
//! - [`proxy`]: the reverse proxy, its upstream client and TLS.
//! - [`metrics`]: Prometheus metrics, `/healthz` and `/readyz` on the operator listener.
//! - [`app`]: `run` wiring: config → kernel → store → engine → HTTP until a signal, with one
//!   [`app::shutdown::Shutdown`] handed to every background task.
//! - [`replay`]: `limiter-daemon replay`, an access log through the engine on its own
//!   timestamps (in memory, nothing pushed to a kernel).

pub mod admin;
pub mod app;
pub mod cli;
pub mod clock;
pub mod config;
pub mod edge;
pub mod embedded;
pub mod engine;
pub mod fetch;
pub mod fleet;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz_entry;
pub mod identity;
pub mod kernel;
pub mod metrics;
pub mod model;
pub mod owned_thread;
pub mod proxy;
pub mod replay;
pub mod store;
pub mod surfaces;
pub mod valkey;
