//! The counting rules and what a store is. [`CountStore`] is deliberately narrow: one atomic
//! check-and-count per decision ([`count::apply`] is its reference semantics, [`windows`] the
//! windows it counts in, [`lease`] the reference model of a fleet's leases); [`RecordStore`] is
//! the persistence of keys, strikes, lockouts and allow/deny lists ([`traits`]). The backends
//! live in rooms of their own: [`crate::embedded`] (the default), [`crate::valkey`], and
//! [`crate::fleet`], a fleet's request path on Valkey.
//!
//! Identities reach a store only hashed ([`crate::identity::hash`]); lockouts are kept by
//! (grouped) IP address because they must be restored into the kernel after a reboot.

pub mod count;
pub mod error;
pub mod fleet_remote;
pub mod gate;
pub mod lease;
pub mod lockout_events;
pub mod state_file;
pub mod traits;
pub mod unreadable;
pub mod windows;

pub use crate::model::{KeyRecord, ListEntry, ListKind, LockCause, Lockout, StrikeRecord};
pub use count::{CountOutcome, CountRequest, Limit, Usage, WindowUse};
pub use error::{CorruptFile, StoreError};
pub use gate::Gate;
pub use traits::{CountStore, Counting, RecordStore, Store, StoreFuture};
