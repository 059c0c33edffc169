//! Where counters, keys, lockouts and lists live. [`CountStore`] is deliberately narrow: one atomic
//! check-and-count per decision ([`count::apply`] is its reference semantics); [`RecordStore`] is the persistence
//! of keys, strikes, lockouts and allow/deny lists ([`traits`]). The embedded store ([`embedded`]) is the
//! default; a Valkey backend implements the same traits with one script per decision.
//!
//! Identities reach a store only hashed ([`crate::identity::hash`]); lockouts are kept by
//! (grouped) IP address because they must be restored into the kernel after a reboot.

pub mod count;
pub mod embedded;
pub mod error;
pub mod fleet;
pub mod fleet_remote;
pub mod gate;
pub mod lease;
pub mod open;
pub mod remote;
pub mod state_file;
pub mod traits;
pub mod unreadable;
pub mod valkey;
pub mod windows;

pub use crate::model::{KeyRecord, ListEntry, ListKind, LockCause, Lockout, StrikeRecord};
pub use count::{CountOutcome, CountRequest, Limit, Usage, WindowUse};
pub use embedded::EmbeddedStore;
pub use error::{CorruptFile, StoreError};
pub use gate::Gate;
pub use open::open;
pub use traits::{CountStore, Counting, RecordStore, Store, StoreFuture};
