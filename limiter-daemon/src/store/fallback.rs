//! Store-down behaviour for a remote store: by default, count locally while the remote store
//! fails (degraded, visible through [`Store::degraded`]) and resume it when it answers again;
//! never a crash, never a 5xx for the caller because the store is down.
//!
//! Counting and lockouts fall back: lockouts made while the store is down are kept in memory
//! (and were pushed to the kernel) until they expire. Keys and lists stay with the remote store
//! (the key cache keeps answering from memory meanwhile).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use ipnet::IpNet;
use parking_lot::RwLock;

use super::count::{CountOutcome, CountRequest, Usage};
use super::embedded::counters::Counters;
use super::error::{CorruptFile, StoreError};
use super::gate::Gate;
use super::traits::{CountStore, RecordStore, Store};
use crate::identity::hash::{IdKey, IdentityHasher};
use crate::model::{KeyRecord, ListEntry, ListKind, Lockout, StrikeRecord};

/// How long a failed remote store is left alone before it is tried again.
pub const RETRY_MS: u64 = 5_000;

pub struct FallbackStore {
    remote: Arc<dyn Store>,
    local: Counters,
    degraded: AtomicBool,
    retry_at_ms: AtomicU64,
    local_lockouts: RwLock<HashMap<IpAddr, Lockout>>,
    local_lockout_count: AtomicUsize,
    /// Remote calls that failed (metrics: `store_errors_total`).
    errors: AtomicU64,
}

impl FallbackStore {
    pub fn new(remote: Arc<dyn Store>, max_identities: usize) -> Self {
        FallbackStore {
            remote,
            local: Counters::new(max_identities, 60_000),
            degraded: AtomicBool::new(false),
            retry_at_ms: AtomicU64::new(0),
            local_lockouts: RwLock::new(HashMap::new()),
            local_lockout_count: AtomicUsize::new(0),
            errors: AtomicU64::new(0),
        }
    }
}

impl FallbackStore {
    /// `remote(…)` while the remote store answers; local counting (wrapped by `local`) while it
    /// is down, trying it again every [`RETRY_MS`].
    fn remote_or_local<T>(
        &self,
        req: &CountRequest,
        remote: impl FnOnce(&dyn Store) -> Result<T, StoreError>,
        local: impl FnOnce(CountOutcome) -> T,
    ) -> Result<T, StoreError> {
        let degraded = self.degraded.load(Ordering::Relaxed);
        if degraded && req.now_ms < self.retry_at_ms.load(Ordering::Relaxed) {
            return Ok(local(self.local.check_and_count(req)));
        }
        match remote(&*self.remote) {
            Ok(o) => {
                if degraded {
                    self.degraded.store(false, Ordering::Relaxed);
                    tracing::warn!(
                        event = "store_recovered",
                        "store answers again: counting resumed there"
                    );
                }
                Ok(o)
            }
            Err(err) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                self.retry_at_ms
                    .store(req.now_ms.saturating_add(RETRY_MS), Ordering::Relaxed);
                if !self.degraded.swap(true, Ordering::Relaxed) {
                    tracing::error!(event = "store_degraded", error = %err, "store down: counting locally (degraded)");
                }
                Ok(local(self.local.check_and_count(req)))
            }
        }
    }

    /// A lockout made while the remote store was down.
    fn local_lockout(&self, ip: IpAddr) -> Option<Lockout> {
        if self.local_lockout_count.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.local_lockouts.read().get(&ip).cloned()
    }
}

impl CountStore for FallbackStore {
    fn hasher(&self) -> IdentityHasher {
        self.remote.hasher()
    }

    fn check_and_count(&self, req: &CountRequest) -> Result<CountOutcome, StoreError> {
        self.remote_or_local(req, |remote| remote.check_and_count(req), |o| o)
    }

    fn gate_and_count(&self, ip: IpAddr, req: &CountRequest) -> Result<Gate, StoreError> {
        if let Some(l) = self.local_lockout(ip).filter(|l| l.is_active(req.now_ms)) {
            return Ok(Gate::Locked(l));
        }
        self.remote_or_local(req, |remote| remote.gate_and_count(ip, req), Gate::Counted)
    }

    fn degraded(&self) -> bool {
        self.degraded.load(Ordering::Relaxed)
    }

    fn remote_errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    fn usage(&self, id: &IdKey, now_ms: u64) -> Result<Option<Usage>, StoreError> {
        if self.degraded() {
            return Ok(self.local.usage(id, now_ms));
        }
        self.remote.usage(id, now_ms)
    }

    fn identity_count(&self) -> usize {
        self.remote.identity_count() + self.local.len()
    }
}

impl RecordStore for FallbackStore {
    fn put_key(&self, record: KeyRecord) -> Result<(), StoreError> {
        self.remote.put_key(record)
    }

    fn key(&self, id: &str) -> Result<Option<KeyRecord>, StoreError> {
        self.remote.key(id)
    }

    fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.remote.keys()
    }

    fn strikes(&self, ip: IpAddr) -> Result<Option<StrikeRecord>, StoreError> {
        self.remote.strikes(ip)
    }

    fn put_lockout(
        &self,
        lockout: Lockout,
        strikes: Option<StrikeRecord>,
    ) -> Result<(), StoreError> {
        if let Err(err) = self.remote.put_lockout(lockout.clone(), strikes) {
            self.errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(error = %err, "store down: lockout kept in memory only");
            let mut m = self.local_lockouts.write();
            m.retain(|_, l| l.is_active(lockout.since_ms));
            m.insert(lockout.ip, lockout);
            self.local_lockout_count.store(m.len(), Ordering::Release);
        }
        Ok(())
    }

    fn lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        if let Some(l) = self.local_lockout(ip) {
            return Ok(Some(l));
        }
        if self.degraded() {
            // Do not pay a round trip per request while the store is known down.
            return Ok(None);
        }
        self.remote.lockout(ip)
    }

    fn remove_lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        self.remote.remove_lockout(ip)
    }

    fn lockouts(&self, now_ms: u64) -> Result<Vec<Lockout>, StoreError> {
        self.remote.lockouts(now_ms)
    }

    fn list(&self, kind: ListKind) -> Result<Vec<ListEntry>, StoreError> {
        self.remote.list(kind)
    }

    fn put_list_entry(&self, kind: ListKind, entry: ListEntry) -> Result<(), StoreError> {
        self.remote.put_list_entry(kind, entry)
    }

    fn remove_list_entry(&self, kind: ListKind, net: &IpNet) -> Result<bool, StoreError> {
        self.remote.remove_list_entry(kind, net)
    }

    fn corrupt_files(&self) -> Vec<CorruptFile> {
        self.remote.corrupt_files()
    }
}
