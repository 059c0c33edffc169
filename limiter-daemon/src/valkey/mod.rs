//! A Valkey store: the same [`Store`](crate::store::Store) semantics with counters in Valkey
//! (standalone or Valkey Cluster, detected at connect), so a fleet shares budgets.
//!
//! - Construction ([`ValkeyStore::new`]) checks the settings and chooses the hashing secret
//!   without needing the server; [`ValkeyStore::connect`] (retried by the caller until it
//!   succeeds) makes the connections, loads the script and reconciles the fleet secret
//!   ([`secret`]). Calls before that fail at once.
//! - The request path awaits [`CountStore::gate_and_count_async`](crate::store::CountStore::gate_and_count_async): one script call
//!   ([`script`]) on one multiplexed connection ([`conn`]), in one cluster slot for every kind
//!   of caller ([`layout`]). Lockouts are not asked on that path: each host keeps a replica fed
//!   by the lockout stream ([`stream`]).
//! - The synchronous trait methods (admin, the key cache, tests) run their call on the store's
//!   own one-thread runtime (`valkey-io`, which also drives the connections and the stream
//!   follower) and wait for it, so they work from any thread, inside a runtime or not.
//!
//! What this backend does not do itself: fall back when the server is down (the engine wraps
//! it in [`crate::fleet::FleetStore`]).

mod checked;
pub mod commands;
pub mod conn;
pub mod fleet_remote;
mod inner;
pub mod layout;
pub mod lease;
pub mod options;
mod records;
pub mod script;
pub mod secret;
pub mod stream;
pub mod valkey_store;

pub use self::conn::Topology;
pub use self::options::{default_host, ValkeyOptions, SECRET_FILE};
pub use self::valkey_store::ValkeyStore;
