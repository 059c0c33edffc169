//! [`FleetStore`], a fleet's shared store as the request path sees it: what `[store]` gives it
//! ([`FleetSettings`]), what it counts ([`FleetStats`]), the answers it gives without the store
//! (a replica's lockout, a held refusal, the degraded answer), the settling of the store's
//! answer. The follower's sink that feeds the replica and then the engine is in
//! `replica_sink.rs`, [`FleetStore::start`] in `start.rs`.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use ipnet::IpNet;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::breaker::{Breaker, Path};
use super::over_limit::OverLimit;
use super::replica::Replica;
use super::writer::{Write, Writer};
use crate::config::store::{OnFailure, StoreSettings};
use crate::embedded::counters::Counters;
use crate::identity::hash::{IdKey, IdentityHasher};
use crate::model::{KeyRecord, ListEntry, ListKind, Lockout, PerWindow, StrikeRecord, WindowKind};
use crate::store::count::{CountOutcome, CountRequest, Usage};
use crate::store::error::{CorruptFile, StoreError};
use crate::store::fleet_remote::FleetRemote;
use crate::store::gate::Gate;
use crate::store::lockout_events::{LockoutEvent, LockoutEvents, RemoteStats};
use crate::store::traits::{CountStore, Counting, RecordStore};
use crate::store::unreadable::{RecordKind, UnreadableRecord};

/// How long a strike record is remembered after its quiet period began (as in the store).
const STRIKE_MEMORY_MS: u64 = 7 * 86_400_000;

/// What the request path needs of `[store]`.
#[derive(Clone, Copy, Debug)]
pub struct FleetSettings {
    pub decision_timeout: Duration,
    pub probe_interval: Duration,
    pub on_failure: OnFailure,
    pub max_identities: usize,
    /// Leased budgets (`[store] leases`, [`crate::store::lease`]), when the remote grants them.
    pub leases: bool,
    pub lease_max: u32,
    pub lease_ttl: Duration,
}

impl FleetSettings {
    pub fn from_store(s: &StoreSettings) -> Self {
        FleetSettings {
            decision_timeout: s.decision_timeout,
            probe_interval: s.probe_interval,
            on_failure: s.on_failure,
            max_identities: s.max_identities,
            leases: s.leases,
            lease_max: s.lease_max,
            lease_ttl: s.lease_ttl,
        }
    }
}

/// Counters of what the fleet store did (metrics).
#[derive(Debug, Default)]
pub struct FleetStats {
    pub remote_calls: AtomicU64,
    pub timeouts: AtomicU64,
    pub over_limit_hits: AtomicU64,
    pub events_applied: AtomicU64,
}

pub struct FleetStore {
    pub(super) remote: Arc<dyn FleetRemote>,
    pub(super) settings: FleetSettings,
    pub(super) breaker: Breaker,
    pub(super) connected: AtomicBool,
    pub(super) local: Counters,
    pub(super) over_limit: Arc<OverLimit>,
    pub(super) replica: Replica,
    pub(super) writer: Arc<Writer>,
    /// Where events from other hosts go after the replica (the engine: kernel, lists).
    pub(super) downstream: OnceLock<Arc<dyn LockoutEvents>>,
    pub(super) following: AtomicBool,
    /// Signalled when the first connect succeeds.
    pub(super) first_connect: (parking_lot::Mutex<bool>, parking_lot::Condvar),
    pub(super) reconnect: Arc<Notify>,
    pub(super) errors: AtomicU64,
    pub(super) stats: FleetStats,
    pub(super) cancel: CancellationToken,
    pub(super) me: Weak<FleetStore>,
    /// This host's leases, when leasing (`super::leased`).
    pub(super) leases: Option<Arc<super::leases::Leases>>,
}

impl Drop for FleetStore {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl FleetStore {
    pub fn stats(&self) -> &FleetStats {
        &self.stats
    }

    /// True once the store has been reached (it may have failed since: see `degraded`).
    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::Acquire)
    }

    /// Waits up to `timeout` for the first connect; `true` once connected. The daemon gives
    /// the store a moment at start, so its first decisions are counted there.
    pub fn wait_connected(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let (lock, cv) = &self.first_connect;
        let mut done = lock.lock();
        while !*done {
            if cv.wait_until(&mut done, deadline).timed_out() {
                break;
            }
        }
        *done
    }

    /// Lockout writes not yet in the store.
    pub fn writes_queued(&self) -> usize {
        self.writer.queued()
    }

    /// What a decision answers while the store is down, per `on_failure`.
    fn degraded_answer(&self, req: &CountRequest) -> Result<Gate, StoreError> {
        match self.settings.on_failure {
            OnFailure::Local => Ok(Gate::Counted(self.local.check_and_count(req))),
            OnFailure::Open => Err(StoreError::Open),
            OnFailure::Closed => Err(StoreError::Closed {
                retry_after_secs: self.breaker.probe_ms().div_ceil(1000).max(1),
            }),
        }
    }

    /// The answer without the store, if there is one: the caller's lockout, a refusal that
    /// still holds, or (the breaker open) the degraded answer. `None`: ask the store.
    pub(super) fn local_answer(
        &self,
        ip: Option<IpAddr>,
        req: &CountRequest,
        miss: &mut Option<super::leases::Miss>,
    ) -> Option<Result<Gate, StoreError>> {
        if let Some(l) = ip
            .and_then(|ip| self.replica.lockout(ip))
            .filter(|l| l.is_active(req.now_ms))
        {
            return Some(Ok(Gate::Locked(l)));
        }
        // A held refusal answers, unless the caller holds a grant here: the store counted
        // those units for this host, so they are spent first.
        let holds = self.leases.as_ref().is_some_and(|l| l.holds(req));
        if !holds {
            if let Some(o) = self.over_limit.refusal(req) {
                self.stats.over_limit_hits.fetch_add(1, Ordering::Relaxed);
                return Some(Ok(Gate::Counted(self.with_local_burst(req, o))));
            }
        }
        // A grant held here answers even while the store is down: only then the fallback.
        if let Some(a) = self.lease_answer(req, miss) {
            return Some(a);
        }
        if !self.connected() {
            // Never reached yet: the connector is trying; nothing to probe.
            self.miss_unasked(miss);
            return Some(self.degraded_answer(req));
        }
        match self.breaker.path(req.now_ms) {
            Path::Local => {
                self.miss_unasked(miss);
                Some(self.degraded_answer(req))
            }
            Path::Remote | Path::Probe => None,
        }
    }

    /// Counts `req` toward this host's own copy of its burst window. Every request that
    /// reaches counting is counted here too, remote or not, so when a held refusal is
    /// answered locally the burst it counts starts from what the store has seen from this
    /// host: the same answers as the store's on one host (a fleet's other hosts are not in it).
    pub(super) fn count_local_burst(&self, req: &CountRequest) -> Option<CountOutcome> {
        req.limits[WindowKind::Burst]?;
        let burst_only = CountRequest {
            limits: PerWindow::from_fn(|k| {
                if k == WindowKind::Burst {
                    req.limits[k]
                } else {
                    None
                }
            }),
            ..req.caller_only()
        };
        Some(self.local.check_and_count(&burst_only))
    }

    /// A held refusal with the burst counted here: every request that arrives counts toward
    /// the burst, so a loop on a spent budget is still struck.
    fn with_local_burst(&self, req: &CountRequest, mut o: CountOutcome) -> CountOutcome {
        if let Some(b) = self.count_local_burst(req) {
            o.uses[WindowKind::Burst] = b.uses[WindowKind::Burst];
            o.refused[WindowKind::Burst] = b.refused[WindowKind::Burst];
        }
        o.admitted = false;
        o
    }

    /// The store answered (a decision, or the connector's probe): closes the breaker, and
    /// logs the recovery when it was open.
    pub(super) fn recovered(&self) {
        if self.breaker.success() {
            tracing::warn!(
                event = "store_recovered",
                "store answers again: counting resumed there"
            );
        }
    }

    /// Settles the store's answer: the breaker, the over-limit cache, and the degraded answer
    /// when the store failed.
    pub(super) fn settle(
        &self,
        req: &CountRequest,
        here: Option<CountOutcome>,
        answer: Result<Gate, StoreError>,
    ) -> Result<Gate, StoreError> {
        match answer {
            Ok(mut gate) => {
                // This host's own burst count holds every request it sent, also those a held
                // refusal answered here: the store's can be short of them just after.
                if let (Gate::Counted(o), Some(b)) = (&mut gate, here) {
                    if b.uses[WindowKind::Burst].map(|w| w.used)
                        > o.uses[WindowKind::Burst].map(|w| w.used)
                    {
                        o.uses[WindowKind::Burst] = b.uses[WindowKind::Burst];
                        if b.refused[WindowKind::Burst] {
                            o.refused[WindowKind::Burst] = true;
                            o.admitted = false;
                        }
                    }
                }
                self.recovered();
                if let Gate::Counted(o) = &gate {
                    self.over_limit.remember(req, o);
                }
                Ok(gate)
            }
            Err(err) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                if self.breaker.failure(req.now_ms) {
                    tracing::error!(event = "store_degraded", error = %err, "store down: decisions follow on_failure (degraded)");
                    self.reconnect.notify_one();
                }
                match (self.settings.on_failure, here) {
                    // The burst was counted here already: count the rest, once.
                    (OnFailure::Local, Some(b)) => {
                        let mut rest = *req;
                        rest.limits[WindowKind::Burst] = None;
                        let mut o = self.local.check_and_count(&rest);
                        o.uses[WindowKind::Burst] = b.uses[WindowKind::Burst];
                        if b.refused[WindowKind::Burst] {
                            o.refused[WindowKind::Burst] = true;
                            o.admitted = false;
                        }
                        Ok(Gate::Counted(o))
                    }
                    _ => self.degraded_answer(req),
                }
            }
        }
    }

    /// Feeds this host's own lockout to the replica and the writer.
    fn put_local(&self, lockout: Lockout, strikes: Option<StrikeRecord>) {
        self.replica.put(lockout.clone(), strikes);
        self.writer.push(Write::Put(lockout, strikes));
    }
}

impl CountStore for FleetStore {
    fn hasher(&self) -> IdentityHasher {
        self.remote.hasher()
    }

    fn check_and_count(&self, req: &CountRequest) -> Result<CountOutcome, StoreError> {
        let mut miss = None;
        let gate = match self.local_answer(None, req, &mut miss) {
            Some(a) => a,
            None => {
                self.miss_unasked(&mut miss);
                self.stats.remote_calls.fetch_add(1, Ordering::Relaxed);
                let here = self.count_local_burst(req);
                let a = self.remote.check_and_count(req).map(Gate::Counted);
                self.settle(req, here, a)
            }
        }?;
        match gate {
            Gate::Counted(o) => Ok(o),
            Gate::Locked(_) => Err(StoreError::Valkey {
                op: "check_and_count",
                message: "a lockout where counts were asked".into(),
            }),
        }
    }

    fn gate_and_count(&self, ip: IpAddr, req: &CountRequest) -> Result<Gate, StoreError> {
        let mut miss = None;
        if let Some(a) = self.local_answer(Some(ip), req, &mut miss) {
            return a;
        }
        self.stats.remote_calls.fetch_add(1, Ordering::Relaxed);
        let here = self.count_local_burst(req);
        if let Some(m) = miss {
            let mut m = m;
            let back = std::mem::take(&mut m.back);
            let a = self.remote.lease(m.asks, false, back).map(|mut grants| {
                if let Some(l) = self.leases.as_ref().filter(|l| l.any_refused(&m, &grants)) {
                    let waits = l.refill_waits(&m, &grants);
                    if waits {
                        let deadline = std::time::Instant::now() + self.settings.decision_timeout;
                        l.wait_refills(&m, &grants, deadline);
                    }
                    let back = l.rescue(&mut m, &mut grants);
                    let retry = l.retry(&m, &grants);
                    // A refill that landed meanwhile may be past its slot already: its units
                    // go back in the retry's round trip, ahead of the ask.
                    if (waits || !back.is_empty()) && retry.iter().any(Option::is_some) {
                        if let Ok(again) = self.remote.lease(retry, true, back) {
                            l.retried(&mut grants, &retry, &again);
                        }
                    } else {
                        l.settle_rescue(back);
                    }
                }
                grants
            });
            return self.settle_lease(req, here, m, a);
        }
        let a = self.remote.check_and_count(req).map(Gate::Counted);
        self.settle(req, here, a)
    }

    fn gate_and_count_async(&self, ip: IpAddr, req: &CountRequest) -> Counting<'_> {
        let mut miss = None;
        if let Some(a) = self.local_answer(Some(ip), req, &mut miss) {
            return Counting::Ready(a);
        }
        self.stats.remote_calls.fetch_add(1, Ordering::Relaxed);
        let here = self.count_local_burst(req);
        let req = *req;
        if let Some(m) = miss {
            return self.lease_pending(req, here, m);
        }
        match self.remote.gate_and_count_async(ip, &req) {
            Counting::Ready(a) => Counting::Ready(self.settle(&req, here, a)),
            Counting::Pending(call) => {
                let deadline = self.settings.decision_timeout;
                Counting::Pending(Box::pin(async move {
                    let a = match tokio::time::timeout(deadline, call).await {
                        Ok(a) => a,
                        Err(_) => {
                            self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                            Err(StoreError::Valkey {
                                op: "check_and_count",
                                message: format!(
                                    "no answer within decision_timeout ({deadline:?})"
                                ),
                            })
                        }
                    };
                    // A probe's failure must not leave the replica's lockouts unchecked: the
                    // caller's lockout was read before the call.
                    self.settle(&req, here, a)
                }))
            }
        }
    }

    fn usage(&self, id: &IdKey, now_ms: u64) -> Result<Option<Usage>, StoreError> {
        if self.breaker.is_open() {
            return Ok(self.local.usage(id, now_ms));
        }
        self.remote.usage(id, now_ms)
    }

    fn identity_count(&self) -> usize {
        self.remote.identity_count() + self.local.len()
    }

    fn degraded(&self) -> bool {
        self.breaker.is_open()
    }

    fn not_following(&self) -> Option<String> {
        if !self.following.load(Ordering::Acquire) {
            return None;
        }
        self.remote.follower_error()
    }

    fn remote_errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    fn secret_mismatches(&self) -> u64 {
        self.remote.secret_mismatches()
    }

    fn remote_stats(&self) -> Option<RemoteStats> {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Some(RemoteStats {
            remote_calls: load(&self.stats.remote_calls),
            timeouts: load(&self.stats.timeouts),
            over_limit_answers: load(&self.stats.over_limit_hits),
            events_applied: load(&self.stats.events_applied),
            writes_queued: self.writer.queued() as u64,
            writes_dropped: self.writer.dropped(),
            ..self
                .leases
                .as_ref()
                .map_or_else(RemoteStats::default, |l| RemoteStats {
                    lease_answers: load(&l.stats.local),
                    lease_grants: load(&l.stats.grants),
                    lease_refills: load(&l.stats.refills),
                    lease_given_back: load(&l.stats.given_back),
                    ..RemoteStats::default()
                })
        })
    }
}

impl RecordStore for FleetStore {
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
        Ok(self.replica.strikes(ip))
    }

    fn put_lockout(
        &self,
        lockout: Lockout,
        strikes: Option<StrikeRecord>,
    ) -> Result<(), StoreError> {
        self.replica.sweep(lockout.since_ms, STRIKE_MEMORY_MS);
        self.put_local(lockout, strikes);
        Ok(())
    }

    fn lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        Ok(self.replica.lockout(ip))
    }

    fn remove_lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        let old = self.replica.remove(ip);
        self.writer.push(Write::Remove(ip));
        Ok(old)
    }

    /// Here at once; in the shared store and on the other hosts (through the stream) before it
    /// returns, or an error when the shared store cannot be reached.
    fn forget_strikes(&self, ip: IpAddr) -> Result<bool, StoreError> {
        // The lockout writes queued here (the strikes being forgotten among them) land first,
        // so none writes them back after; bounded, as an operator waits on it.
        self.writer.wait_drained(Duration::from_secs(2));
        let here = self.replica.forget_strikes(ip);
        Ok(self.remote.forget_strikes(ip)? || here)
    }

    fn lockouts(&self, now_ms: u64) -> Result<Vec<Lockout>, StoreError> {
        Ok(self.replica.active(now_ms))
    }

    fn list(&self, kind: ListKind) -> Result<Vec<ListEntry>, StoreError> {
        self.remote.list(kind)
    }

    fn put_list_entry(&self, kind: ListKind, entry: ListEntry) -> Result<(), StoreError> {
        let event = (kind == ListKind::Deny).then(|| LockoutEvent::NetLocked {
            net: entry.net,
            until_ms: entry.until_ms.unwrap_or(u64::MAX),
            reason: entry.comment.clone(),
            host: self.remote.host().to_string(),
        });
        self.remote.put_list_entry(kind, entry)?;
        if let Some(e) = event {
            self.writer.push(Write::Publish(e));
        }
        Ok(())
    }

    fn remove_list_entry(&self, kind: ListKind, net: &IpNet) -> Result<bool, StoreError> {
        let removed = self.remote.remove_list_entry(kind, net)?;
        if removed && kind == ListKind::Deny {
            self.writer.push(Write::Publish(LockoutEvent::NetLifted {
                net: *net,
                host: self.remote.host().to_string(),
            }));
        }
        Ok(removed)
    }

    fn corrupt_files(&self) -> Vec<CorruptFile> {
        self.remote.corrupt_files()
    }

    fn unreadable(&self, kind: RecordKind) -> Result<Vec<UnreadableRecord>, StoreError> {
        self.remote.unreadable(kind)
    }

    fn remove_unreadable(&self, kind: RecordKind, name: &str) -> Result<bool, StoreError> {
        self.remote.remove_unreadable(kind, name)
    }

    fn unreadable_counts(&self) -> Vec<(&'static str, u64)> {
        self.remote.unreadable_counts()
    }

    fn flush(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let drained = self.writer.wait_drained(timeout);
        drained & self.surrender_leases(deadline)
    }

    fn settle(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        self.leases.as_ref().is_none_or(|l| l.wait_idle(deadline))
    }

    fn follow_fleet(&self, sink: Arc<dyn LockoutEvents>) {
        if self.downstream.set(sink).is_ok() && self.connected() {
            self.start_following();
        }
    }
}
