//! Where counters, keys, lockouts and lists live. [`Store`] is deliberately narrow: one atomic
//! check-and-count per decision ([`count::apply`] is its reference semantics), plus persistence
//! of keys, strikes, lockouts and allow/deny lists. The embedded store ([`embedded`]) is the
//! default; a Valkey backend implements the same trait with one script per decision.
//!
//! Identities reach a store only hashed ([`crate::identity::hash`]); lockouts are kept by
//! (grouped) IP address because they must be restored into the kernel after a reboot.

pub mod count;
pub mod embedded;
pub mod fallback;
pub mod gate;
pub mod open;
pub mod state_file;
pub mod valkey;
pub mod windows;

use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::IpNet;

pub use count::{CountOutcome, CountRequest, DailyRule, Usage, WindowUse};
pub use embedded::EmbeddedStore;
pub use gate::Gate;
pub use open::open;
pub use crate::model::{KeyRecord, ListEntry, ListKind, LockCause, Lockout, StrikeRecord};

use crate::identity::hash::{IdKey, IdentityHasher};
use crate::identity::key_cache::KeyLookup;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create state directory {path}")]
    StateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write state file {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read state file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot encode state file {path}")]
    Encode {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("valkey {op}: {message}")]
    Valkey { op: &'static str, message: String },
    #[error("API key id {id} already exists")]
    KeyExists { id: String },
}

/// A state file that could not be read at start: reported, set aside, and started without.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorruptFile {
    pub file: PathBuf,
    pub moved_to: PathBuf,
    pub error: String,
}

/// The store behind the engine.
pub trait Store: KeyLookup + Send + Sync + 'static {
    /// How identities are hashed for this store (its secret lives with the store).
    fn hasher(&self) -> IdentityHasher;
    /// Checks every window of one identity and counts the request if none refuses, atomically.
    fn check_and_count(&self, req: &CountRequest) -> Result<CountOutcome, StoreError>;
    /// What one counted decision asks: `ip`'s lockout if active at `req.now_ms` (nothing
    /// counted), else [`Store::check_and_count`]. Remote stores answer in one round trip; the
    /// default asks the two questions in turn (free for an in-process store).
    fn gate_and_count(&self, ip: IpAddr, req: &CountRequest) -> Result<Gate, StoreError> {
        if let Some(l) = self.lockout(ip)?.filter(|l| l.is_active(req.now_ms)) {
            return Ok(Gate::Locked(l));
        }
        self.check_and_count(req).map(Gate::Counted)
    }
    /// Current use of an identity without counting.
    fn usage(&self, id: &IdKey, now_ms: u64) -> Result<Option<Usage>, StoreError>;
    /// Identities currently tracked.
    fn identity_count(&self) -> usize;

    fn put_key(&self, record: KeyRecord) -> Result<(), StoreError>;
    fn key(&self, id: &str) -> Result<Option<KeyRecord>, StoreError>;
    fn keys(&self) -> Result<Vec<KeyRecord>, StoreError>;

    fn strikes(&self, ip: IpAddr) -> Result<Option<StrikeRecord>, StoreError>;
    /// Records a strike and the lockout it earned together.
    fn put_lockout(
        &self,
        lockout: Lockout,
        strikes: Option<StrikeRecord>,
    ) -> Result<(), StoreError>;
    fn lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError>;
    fn remove_lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError>;
    /// Lockouts still active at `now_ms`.
    fn lockouts(&self, now_ms: u64) -> Result<Vec<Lockout>, StoreError>;

    fn list(&self, kind: ListKind) -> Result<Vec<ListEntry>, StoreError>;
    fn put_list_entry(&self, kind: ListKind, entry: ListEntry) -> Result<(), StoreError>;
    fn remove_list_entry(&self, kind: ListKind, net: &IpNet) -> Result<bool, StoreError>;

    /// True while counting has fallen back to local memory because the store is down.
    fn degraded(&self) -> bool {
        false
    }

    /// Failed calls to a remote store since start (metrics); 0 for stores that cannot fail so.
    fn remote_errors(&self) -> u64 {
        0
    }

    /// State files found corrupt when the store opened.
    fn corrupt_files(&self) -> Vec<CorruptFile> {
        Vec::new()
    }
}
