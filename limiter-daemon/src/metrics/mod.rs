//! The operator's view: Prometheus metrics and the health endpoints, on their own listener.
//!
//! - [`registry`]: [`Metrics`], the one registry built in `run` and shared; renders the text.
//! - [`negotiate`]: which format a scrape's `Accept` asks for (OpenMetrics or classic text).
//! - [`text`]: the classic Prometheus text format (0.0.4) made from the OpenMetrics text.
//! - [`build_info`]: `<ns>_build_info{version, commit, features}`.
//! - [`process`]: the standard `process_*` metrics, from `/proc/self`.
//! - [`decisions`]: counters and the delay histogram fed from every [`Decision`] made.
//! - [`history`]: the ring of samples (15 minutes at 5 s) behind the operator page's charts.
//! - [`sampler`]: the task that fills the history ring every 5 s.
//! - [`histogram`]: the lock-free duration histogram recorded on the request path.
//! - [`decider`]: [`MeteredDecider`], the wrapper every HTTP surface's decisions pass through
//!   (and on to [`registry::DecisionObserver`], the admin API's per-caller table, once set).
//! - [`crawlers`]: the crawler ranges in force and the reverse-DNS lookups, read at scrape.
//! - [`reloads`]: config reloads by result and the hash of the file in force.
//! - [`sources`]: values read at scrape time (held requests, upstream failures, lockouts
//!   active, store degraded, kernel verdict counters and map fill).
//! - [`h2`]: the proxy's HTTP/2 streams and client resets, read at scrape.
//! - [`tunnels`]: the proxy's tunnels (open, opened, refused, closed by reason), read at scrape.
//! - [`readiness`]: what `/readyz` answers and why.
//! - [`server`]: the listener serving `/metrics`, `/healthz` and `/readyz`.
//!
//! Names and labels are listed in `docs/metrics.md`.
//!
//! [`Decision`]: crate::model::Decision

pub mod build_info;
pub mod crawlers;
pub mod decider;
pub mod decisions;
pub mod h2;
pub mod histogram;
pub mod history;
pub mod negotiate;
pub mod process;
pub mod readiness;
pub mod registry;
pub mod reloads;
pub mod sampler;
pub mod server;
pub mod sources;
pub mod text;
pub mod tunnels;

pub use decider::MeteredDecider;
pub use readiness::Readiness;
pub use registry::Metrics;
pub use sources::KernelSource;
