//! What the engine asks of a store, in two traits: [`CountStore`], the hot path (one call per
//! decision, plus the read-only views of counters), and [`RecordStore`], persistence of keys,
//! strikes, lockouts and allow/deny lists. [`Store`] is both; every backend implements both.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use ipnet::IpNet;

use super::count::{CountOutcome, CountRequest, Usage};
use super::error::{CorruptFile, StoreError};
use super::gate::Gate;
use super::lockout_events::LockoutEvents;
use super::unreadable::{RecordKind, UnreadableRecord};
use crate::identity::hash::{IdKey, IdentityHasher};
use crate::model::{KeyRecord, ListEntry, ListKind, Lockout, StrikeRecord};

/// A remote store's call in flight.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// One counted decision's store work as the request path receives it: answered in place, or
/// a remote call to await. Awaiting is the only way a request waits on a remote store; no
/// request thread ever blocks on its I/O.
#[allow(
    clippy::large_enum_variant,
    reason = "the ready answer is the embedded store's every decision; boxing it would allocate"
)]
pub enum Counting<'a> {
    /// Answered without I/O: an in-process store, or a remote store's local answer (lockout
    /// replica, over-limit cache, degraded local counting).
    Ready(Result<Gate, StoreError>),
    /// A remote call; the future owns what it needs from the request.
    Pending(StoreFuture<'a, Gate>),
}

/// The counting side: what a decision costs the store.
pub trait CountStore: Send + Sync + 'static {
    /// How identities are hashed for this store (its secret lives with the store).
    fn hasher(&self) -> IdentityHasher;
    /// Checks every window of one identity and counts the request if none refuses, atomically.
    fn check_and_count(&self, req: &CountRequest) -> Result<CountOutcome, StoreError>;
    /// What one counted decision asks: `ip`'s lockout if active at `req.now_ms` (nothing
    /// counted), else [`CountStore::check_and_count`]. Remote stores answer in one round trip;
    /// an in-process store asks the two questions in turn ([`lockout_then_count`]).
    fn gate_and_count(&self, ip: IpAddr, req: &CountRequest) -> Result<Gate, StoreError>;
    /// [`CountStore::gate_and_count`] for the request path: never blocks on I/O. The default
    /// answers in place, right for a store whose every answer is in memory.
    fn gate_and_count_async(&self, ip: IpAddr, req: &CountRequest) -> Counting<'_> {
        Counting::Ready(self.gate_and_count(ip, req))
    }
    /// Current use of an identity without counting.
    fn usage(&self, id: &IdKey, now_ms: u64) -> Result<Option<Usage>, StoreError>;
    /// Identities currently tracked.
    fn identity_count(&self) -> usize;

    /// True while counting has fallen back to local memory because the store is down.
    fn degraded(&self) -> bool {
        false
    }

    /// Failed calls to a remote store since start (metrics); 0 for stores that cannot fail so.
    fn remote_errors(&self) -> u64 {
        0
    }

    /// What a fleet store did (metrics); `None` for a store that is not shared.
    fn remote_stats(&self) -> Option<super::lockout_events::RemoteStats> {
        None
    }

    /// Times this process found the fleet's hashing secret in the remote store different from
    /// the one it hashes with (metrics: hosts counting one caller under two keys).
    fn secret_mismatches(&self) -> u64 {
        0
    }

    /// Why this host does not follow the fleet's lockout stream now, so other hosts'
    /// lockouts do not reach it (readiness, the operator page). `None`: it does, or there is
    /// no fleet.
    fn not_following(&self) -> Option<String> {
        None
    }
    /// Writes the in-memory counters to disk so a restart keeps them (blocking I/O: call it off
    /// the request path). `None`: this store keeps its counters elsewhere (Valkey).
    fn persist_counters(&self, _now_ms: u64) -> Result<Option<usize>, StoreError> {
        Ok(None)
    }
}

/// The records side: what operators and lockouts keep.
pub trait RecordStore: Send + Sync + 'static {
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
    /// Forgets `ip`'s strike record, so its next burst strikes at level 1 again (an operator's
    /// `lockouts remove --forget-strikes`); on a fleet, on every host. `true` when there was
    /// one here.
    fn forget_strikes(&self, ip: IpAddr) -> Result<bool, StoreError>;
    /// Lockouts still active at `now_ms`.
    fn lockouts(&self, now_ms: u64) -> Result<Vec<Lockout>, StoreError>;

    fn list(&self, kind: ListKind) -> Result<Vec<ListEntry>, StoreError>;
    fn put_list_entry(&self, kind: ListKind, entry: ListEntry) -> Result<(), StoreError>;
    fn remove_list_entry(&self, kind: ListKind, net: &IpNet) -> Result<bool, StoreError>;

    /// The records of `kind` the store holds but cannot read (skipped by every other call),
    /// for the admin API. The default: a store whose records always read (the embedded one
    /// sets a whole corrupt file aside at start instead).
    fn unreadable(&self, _kind: RecordKind) -> Result<Vec<UnreadableRecord>, StoreError> {
        Ok(Vec::new())
    }
    /// Deletes the unreadable record of `kind` named `name` (a list's raw field, a key's id);
    /// `false` when there is no unreadable record by that name (a readable one is left alone).
    fn remove_unreadable(&self, _kind: RecordKind, _name: &str) -> Result<bool, StoreError> {
        Ok(false)
    }
    /// Unreadable records met since start, per kind (the `kind` label; metrics).
    fn unreadable_counts(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Delivers lockout events made by other hosts of a fleet to `sink` from now on (a store
    /// shared by a fleet follows its lockout stream). The default: no fleet, nothing to do.
    fn follow_fleet(&self, _sink: Arc<dyn LockoutEvents>) {}

    /// Waits up to `timeout` for writes this store queued to reach their destination; `true`
    /// when they have (one-shot commands call it before exiting). The default: writes are
    /// made in place.
    fn flush(&self, _timeout: std::time::Duration) -> bool {
        true
    }

    /// Waits up to `timeout` until what this store does behind the request path for the
    /// requests already decided (lease refills, give-backs) has landed; `true` when it has.
    /// Tests on an injected clock call it between requests: the real time between two of
    /// them would have let it land. The default: nothing is done behind the request path.
    fn settle(&self, _timeout: std::time::Duration) -> bool {
        true
    }

    /// State files found corrupt when the store opened.
    fn corrupt_files(&self) -> Vec<CorruptFile> {
        Vec::new()
    }
}

/// The store behind the engine: both sides.
pub trait Store: CountStore + RecordStore {}

impl<T: CountStore + RecordStore> Store for T {}

/// [`CountStore::gate_and_count`] for a store that answers both questions cheaply in turn: the
/// lockout first, then the count (what the embedded store does).
pub fn lockout_then_count<S: CountStore + RecordStore + ?Sized>(
    store: &S,
    ip: IpAddr,
    req: &CountRequest,
) -> Result<Gate, StoreError> {
    if let Some(l) = store.lockout(ip)?.filter(|l| l.is_active(req.now_ms)) {
        return Ok(Gate::Locked(l));
    }
    store.check_and_count(req).map(Gate::Counted)
}
