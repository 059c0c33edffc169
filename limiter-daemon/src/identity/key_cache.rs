//! The API key cache: verification is answered from memory; lookups happen behind the request.
//!
//! - A key ID never seen before answers [`KeyCheck::Pending`] (the caller is metered one rung
//!   down) and queues a lookup; once it lands the key settles to verified or invalid.
//! - Lookups in flight are bounded per source address (`keys.max_pending_per_source`): past
//!   the bound a new key answers [`KeyCheck::Deferred`] and counts as no key until that
//!   source's lookups land, so a caller inventing key ids buys at most that many lookups at a
//!   time (and each answer is then negatively cached).
//! - Unknown and revoked keys are cached as negative answers for `negative_ttl`, and keep
//!   answering invalid while they are refreshed: metered down, never up.
//! - Verified answers are served for `cache_ttl`, then served stale while refreshed.
//! - Secrets are compared as hashes, in constant time.
//!
//! Lookups run on a background thread ([`KeyCache::spawn_refresher`]) or, in tests, when the
//! test calls [`KeyCache::process_pending`], so "the lookup landed" is a step the test takes.
//! The thread ends like every background job, on a cancellation token (the daemon's shutdown,
//! or one its [`Refresher`] cancels when it drops), and can hold a task tracker open until it
//! has ended, so a drain waits for it. It is a thread, not a task: engines are built and used
//! outside any runtime (tests, benches, library users), and a lookup may block on the store.

use crate::owned_thread::OwnedThread;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::net::IpAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

use parking_lot::{Condvar, Mutex, RwLock};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;
use tokio_util::task::task_tracker::TaskTrackerToken;

use super::hash::IdentityHasher;
use crate::model::KeyRecord;

/// Where verified keys come from (the store, adapted by the engine: identity sits below the
/// store and never names it).
pub trait KeyLookup: Send + Sync + 'static {
    fn lookup_key(&self, id: &str) -> Result<Option<KeyRecord>, LookupFailed>;
}

/// A lookup the backend could not answer; the cache keeps its old answer and retries later.
#[derive(Debug, thiserror::Error)]
#[error("API key lookup failed")]
pub struct LookupFailed(#[source] pub Box<dyn std::error::Error + Send + Sync>);

/// The cache's answer for a presented key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyCheck {
    Verified(Arc<KeyRecord>),
    /// Not known yet; a lookup is queued.
    Pending,
    /// Not known yet, and the presenting address already has its bound of lookups in flight:
    /// no lookup is queued and the caller is metered as if it presented no key.
    Deferred,
    /// Unknown, revoked or wrong secret.
    Invalid,
}

enum Slot {
    Known {
        record: Arc<KeyRecord>,
        fetched_ms: u64,
    },
    Absent {
        fetched_ms: u64,
    },
}

#[derive(Default)]
struct Queue {
    /// Key ids in flight, with the source address whose request queued the lookup.
    pending: HashMap<String, IpAddr>,
    /// Lookups in flight per source address (no entry: none).
    per_source: HashMap<IpAddr, u32>,
    order: VecDeque<String>,
    stop: bool,
}

impl Queue {
    /// Marks `id`'s lookup as landed (or abandoned), releasing its source's share.
    fn finish(&mut self, id: &str) {
        let Some(source) = self.pending.remove(id) else {
            return;
        };
        if let Some(n) = self.per_source.get_mut(&source) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&source);
            }
        }
    }
}

const SLOT_SHARDS: usize = 16;

#[derive(Default)]
#[repr(align(64))]
struct SlotShard {
    slots: RwLock<HashMap<String, Slot>>,
    consulted: AtomicU64,
}

/// Bound on queued lookups: beyond it, new IDs stay pending until the queue drains.
const MAX_QUEUED: usize = 10_000;

pub struct KeyCache {
    /// Answers, sharded by key id so verified callers on different cores rarely share a
    /// lock or a counter's cache line.
    shards: Box<[SlotShard]>,
    queue: Mutex<Queue>,
    wake: Condvar,
    lookup: Arc<dyn KeyLookup>,
    hasher: IdentityHasher,
    ttl_ms: u64,
    negative_ttl_ms: u64,
    /// Per shard.
    capacity: usize,
    max_pending_per_source: u32,
    lookups: AtomicU64,
}

impl KeyCache {
    pub fn new(
        lookup: Arc<dyn KeyLookup>,
        hasher: IdentityHasher,
        settings: &crate::config::KeySettings,
    ) -> Self {
        KeyCache {
            shards: (0..SLOT_SHARDS).map(|_| SlotShard::default()).collect(),
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            lookup,
            hasher,
            ttl_ms: u64::try_from(settings.cache_ttl.as_millis()).unwrap_or(u64::MAX),
            negative_ttl_ms: u64::try_from(settings.negative_ttl.as_millis()).unwrap_or(u64::MAX),
            capacity: settings.cache_capacity.div_ceil(SLOT_SHARDS).max(1),
            max_pending_per_source: settings.max_pending_per_source.get(),
            lookups: AtomicU64::new(0),
        }
    }

    fn shard(&self, id: &str) -> &SlotShard {
        // FNV-1a: ids are 8 hex digits chosen at random, any spread will do.
        let h = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        &self.shards[(h % SLOT_SHARDS as u64) as usize]
    }

    /// How many times a presented key reached the cache (tests: wrong shapes must not).
    pub fn consultations(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.consulted.load(Ordering::Relaxed))
            .sum()
    }

    /// How many backend lookups ran.
    pub fn lookups(&self) -> u64 {
        self.lookups.load(Ordering::Relaxed)
    }

    /// What the cache holds: (answers cached, lookups in flight, sources with lookups in
    /// flight). Tests check these stay bounded.
    pub fn held(&self) -> (usize, usize, usize) {
        let answers = self.shards.iter().map(|s| s.slots.read().len()).sum();
        let q = self.queue.lock();
        (answers, q.pending.len(), q.per_source.len())
    }

    /// Answers from memory; never waits for the backend. `source` is the (grouped) client
    /// address that presented the key: its lookups in flight are bounded.
    pub fn check(&self, id: &str, secret: &str, source: IpAddr, now_ms: u64) -> KeyCheck {
        let shard = self.shard(id);
        shard.consulted.fetch_add(1, Ordering::Relaxed);
        let (answer, refresh) = {
            let slots = shard.slots.read();
            match slots.get(id) {
                None => (KeyCheck::Pending, true),
                Some(Slot::Absent { fetched_ms }) => (
                    KeyCheck::Invalid,
                    now_ms.saturating_sub(*fetched_ms) >= self.negative_ttl_ms,
                ),
                Some(Slot::Known { record, fetched_ms }) => {
                    let stale = now_ms.saturating_sub(*fetched_ms) >= self.ttl_ms;
                    (self.compare(record, secret), stale)
                }
            }
        };
        if !refresh {
            return answer;
        }
        let queued = self.request(id, source);
        match answer {
            KeyCheck::Pending if !queued => KeyCheck::Deferred,
            // A refresh refused by the bound keeps serving the cached answer.
            answer => answer,
        }
    }

    fn compare(&self, record: &Arc<KeyRecord>, secret: &str) -> KeyCheck {
        let presented = self.hasher.secret_hash(secret);
        let Ok(stored) = hex::decode(&record.secret_hash) else {
            return KeyCheck::Invalid;
        };
        let equal: bool = presented.as_slice().ct_eq(stored.as_slice()).into();
        if equal && !record.is_revoked() {
            KeyCheck::Verified(Arc::clone(record))
        } else {
            KeyCheck::Invalid
        }
    }

    /// Queues a lookup of `id` for `source`. True when `id` is in flight afterwards (queued
    /// now or before); false when a bound refused it.
    fn request(&self, id: &str, source: IpAddr) -> bool {
        let mut q = self.queue.lock();
        if q.pending.contains_key(id) {
            return true;
        }
        let in_flight = q.per_source.get(&source).copied().unwrap_or(0);
        if q.pending.len() >= MAX_QUEUED || in_flight >= self.max_pending_per_source {
            return false;
        }
        q.pending.insert(id.to_string(), source);
        *q.per_source.entry(source).or_insert(0) += 1;
        q.order.push_back(id.to_string());
        drop(q);
        self.wake.notify_one();
        true
    }

    /// Forget what is known about `id` and answer invalid from now on (revocation).
    pub fn invalidate(&self, id: &str, now_ms: u64) {
        self.shard(id)
            .slots
            .write()
            .insert(id.to_string(), Slot::Absent { fetched_ms: now_ms });
    }

    /// Runs one lookup and stores its answer. Backend errors leave the old answer in place.
    fn settle(&self, id: &str, now_ms: u64) {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let slot = match self.lookup.lookup_key(id) {
            Ok(Some(record)) => Slot::Known {
                record: Arc::new(record),
                fetched_ms: now_ms,
            },
            Ok(None) => Slot::Absent { fetched_ms: now_ms },
            Err(err) => {
                tracing::warn!(error = %err, "API key lookup failed; keeping the cached answer");
                self.queue.lock().finish(id);
                return;
            }
        };
        let mut slots = self.shard(id).slots.write();
        // Still "in flight" until the answer is stored, so concurrent requests for the same id
        // do not queue a second lookup.
        self.queue.lock().finish(id);
        if slots.len() >= self.capacity && !slots.contains_key(id) {
            // Negative answers go first; if the cache is full of real keys, drop one at random.
            slots.retain(|_, s| matches!(s, Slot::Known { .. }));
            if slots.len() >= self.capacity {
                if let Some(victim) = slots.keys().next().cloned() {
                    slots.remove(&victim);
                }
            }
        }
        slots.insert(id.to_string(), slot);
    }

    /// Runs every queued lookup now (tests, and the background thread). Returns how many ran.
    pub fn process_pending(&self, now_ms: u64) -> usize {
        let mut n = 0;
        loop {
            let next = self.queue.lock().order.pop_front();
            let Some(id) = next else { return n };
            self.settle(&id, now_ms);
            n += 1;
        }
    }

    /// Starts the background thread that lands lookups. It ends when `stop` is cancelled or
    /// the returned [`Refresher`] drops, whichever comes first (a lookup under way finishes
    /// first); `drain`, when given, is held until the thread has ended, so the tracker it came
    /// from waits for it.
    pub fn spawn_refresher(
        self: &Arc<Self>,
        clock: Arc<dyn crate::clock::Clock>,
        stop: &CancellationToken,
        drain: Option<TaskTrackerToken>,
    ) -> Refresher {
        // A child, so dropping the refresher stops this thread and nothing else.
        let stop = stop.child_token();
        let cache = Arc::clone(self);
        let until = stop.clone();
        let handle = std::thread::Builder::new()
            .name("key-cache".into())
            .spawn(move || {
                let _drain = drain;
                cache.refresh_until(&*clock, until);
            })
            .ok();
        if handle.is_none() {
            tracing::error!("cannot start the key-cache thread; keys settle only on demand");
        }
        OwnedThread::new(stop, handle)
    }

    /// The refresher thread's loop: lands queued lookups until `stop` is cancelled.
    fn refresh_until(self: &Arc<Self>, clock: &dyn crate::clock::Clock, stop: CancellationToken) {
        // Cancelling wakes the Condvar through this waker, registered by one poll of the
        // token's future; the future is kept, so the registration lives as long as the loop.
        let waker = Waker::from(Arc::new(StopWaker {
            cache: Arc::clone(self),
            stop: stop.clone(),
        }));
        let mut cancelled = pin!(stop.cancelled_owned());
        if cancelled
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_ready()
        {
            return;
        }
        loop {
            let id = {
                let mut q = self.queue.lock();
                while q.order.is_empty() && !q.stop {
                    self.wake.wait(&mut q);
                }
                if q.stop {
                    return;
                }
                q.order.pop_front()
            };
            if let Some(id) = id {
                self.settle(&id, clock.now_ms());
            }
        }
    }
}

/// Turns the token's cancellation into the Condvar's stop. The thread never touches the token
/// while it holds the queue lock, and the token wakes with its own locks released, so neither
/// lock waits on the other; taking the queue lock to set `stop` orders it with the thread's
/// check-then-wait, so the wake is never lost.
struct StopWaker {
    cache: Arc<KeyCache>,
    stop: CancellationToken,
}

impl Wake for StopWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.stop.is_cancelled() {
            self.cache.queue.lock().stop = true;
            self.cache.wake.notify_all();
        }
    }
}

/// Owns the refresher thread (see [`OwnedThread`]).
pub type Refresher = OwnedThread;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_util::task::TaskTracker;

    use super::*;
    use crate::clock::ManualClock;

    struct NoKeys;

    impl KeyLookup for NoKeys {
        fn lookup_key(&self, _id: &str) -> Result<Option<KeyRecord>, LookupFailed> {
            Ok(None)
        }
    }

    fn cache() -> Arc<KeyCache> {
        Arc::new(KeyCache::new(
            Arc::new(NoKeys),
            IdentityHasher::sha256(),
            &crate::config::KeySettings::validate(crate::config::keys::RawKeys::default()).unwrap(),
        ))
    }

    #[tokio::test]
    async fn the_refresher_ends_on_its_token_and_holds_the_drain_until_then() {
        let cache = cache();
        let stop = CancellationToken::new();
        let tracker = TaskTracker::new();
        let refresher =
            cache.spawn_refresher(Arc::new(ManualClock::new(0)), &stop, Some(tracker.token()));
        tracker.close();
        let held = tokio::time::timeout(Duration::from_millis(200), tracker.wait()).await;
        assert!(held.is_err(), "the drain waits while the thread runs");
        // Still landing lookups until then.
        let source = "192.0.2.1".parse().unwrap();
        assert_eq!(cache.check("k1", "s", source, 0), KeyCheck::Pending);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while cache.check("k1", "s", source, 0) != KeyCheck::Invalid {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the lookup never landed"
            );
            tokio::task::yield_now().await;
        }
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(10), tracker.wait())
            .await
            .expect("cancelling the token ends the thread, which releases the drain");
        drop(refresher);
    }

    #[test]
    fn dropping_the_refresher_ends_the_thread_without_touching_the_parent() {
        let cache = cache();
        let stop = CancellationToken::new();
        let tracker = TaskTracker::new();
        let refresher =
            cache.spawn_refresher(Arc::new(ManualClock::new(0)), &stop, Some(tracker.token()));
        drop(refresher);
        assert!(tracker.is_empty(), "joined: the thread has ended");
        assert!(!stop.is_cancelled());
    }
}
