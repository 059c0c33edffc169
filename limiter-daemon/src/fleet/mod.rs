//! The fleet: a shared store as the request path sees it ([`FleetStore`]): every counted
//! decision is at most one awaited round trip under a deadline, and often none. [`open`] opens
//! whichever store `[store] backend` names.
//!
//! - **Lockouts** are answered from this host's [`replica`] of the fleet's active lockouts,
//!   kept current by the lockout stream ([`crate::store::lockout_events`]); this host's own lockouts
//!   and lifts go to the replica at once and to the store through the [`writer`]'s queue, so
//!   striking never waits on the store and nothing is lost while it is down.
//! - **Refusals that hold until a known time** are answered from the [`over_limit`] cache.
//! - **Everything else** is one call to the store, awaited with `[store] decision_timeout`.
//!   Past it, or when the store fails, the [`breaker`] opens: decisions follow
//!   `[store] on_failure` (count locally, admit, or refuse with 503) and one decision per
//!   `probe_interval` tries the store again. A connector task reconnects in the background,
//!   so the daemon starts, and keeps serving, while the store is down; while the breaker is
//!   open it probes the store itself every `probe_interval`, so the store's return is found
//!   with no traffic (a host out of its balancer gets none).

pub mod breaker;
mod connector;
pub mod fleet_store;
mod lease_races;
mod lease_task;
mod leased;
pub mod leases;
pub mod open;
pub mod over_limit;
pub mod replica;
pub mod replica_sink;
mod start;
pub mod writer;

pub use self::fleet_store::{FleetSettings, FleetStats, FleetStore};
pub use self::open::open;
