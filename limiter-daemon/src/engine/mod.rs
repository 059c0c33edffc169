//! The decision engine: tier ladder, burst/hourly/daily/key windows, scan delays, strikes and
//! lockouts. [`base`] holds the [`Engine`] and its construction, and each operation is an
//! `impl Engine` in a file of its own; the types every HTTP surface renders live in
//! [`crate::model`] (re-exported here); [`sink`] is how lockouts and verified tiers reach the
//! kernel.
//!
//! # API (what the HTTP surfaces call)
//!
//! ```no_run
//! use std::sync::Arc;
//! use limiter_daemon::{clock::SystemClock, config::{Config, env_from_process}};
//! use limiter_daemon::engine::{Engine, RequestView, sink::NoKernel};
//! use limiter_daemon::embedded::EmbeddedStore;
//!
//! let cfg = Arc::new(Config::load("limiter.toml".as_ref(), &env_from_process())?);
//! let clock = Arc::new(SystemClock);
//! let store = Arc::new(EmbeddedStore::open(&cfg.store, limiter_daemon::clock::Clock::now_ms(&*clock))?);
//! let engine = Engine::new(cfg, store, Arc::new(NoKernel), clock);
//! let headers = http::HeaderMap::new();
//! let client = limiter_daemon::identity::client_ip::Client::Addr("203.0.113.7".parse()?);
//! let d = engine.decide(&RequestView {
//!     client, method: &http::Method::GET, path: "/api/feeds", headers: &headers,
//! });
//! // d.verdict(): Allow | Delay { delay, .. } (hold, then forward) | Reject { reason, retry_after_secs } (429)
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! - [`Engine::decide`] is synchronous. With the embedded store it never blocks on I/O (the
//!   counters are memory; key lookups land behind the request); with the Valkey store it makes
//!   one or two blocking round trips. It never fails: a decision is a value.
//! - [`Engine::explain`]: the same decision without counting anything (admin dry-run).
//! - [`Engine::standing`]: a caller's windows as they are now, counting nothing (self-service).
//! - [`Engine::attempt`]: the compatibility call (120/min burst, no hourly budget).
//! - [`Engine::keys`]: issue (secret returned once), revoke, list API keys.
//! - [`Engine::lockouts`]: list, query, lift, and lock by hand; [`Engine::lock_asn`] and
//!   [`Engine::lift_asn`] an autonomous system as its ranges ([`asn_lockouts`]).
//! - [`Engine::lists`]: allow/deny CIDR lists.
//! - [`Engine::client`]: one client's windows, strikes and lockout (admin view).
//! - [`Engine::reload`]: swap in a new validated [`Config`](crate::config::Config).

pub mod agents;
pub mod asn_lockouts;
pub mod base;
pub mod client;
pub mod compat;
pub mod crawlers;
pub mod decide;
pub mod decided;
pub mod decider;
pub mod error;
pub mod exempt;
pub mod fleet_events;
pub mod keys;
pub mod list_snapshot;
pub mod lists;
pub mod lockouts;
pub mod net_senders;
pub mod net_share;
pub mod net_strikes;
pub mod networks;
pub mod proofs;
pub mod range_reloads;
pub mod request;
pub mod sink;
pub mod standing;
pub mod strikes;
pub mod tier_push;

pub use crate::model::{
    Action, Decision, DelayKind, KeyStatus, Reason, Tier, WindowKind, WindowState,
};
pub use error::EngineError;
pub use request::RequestView;

pub use self::base::{Engine, EngineOptions, KeyRefresh};
