//! This host's leases ([`crate::store::lease`]): per identity the grant being spent and the
//! refill behind it, spent on the request path without I/O; refills (asked when half a grant
//! is spent), give-backs of what expired unspent, and the fleet's host count are the work of
//! one background task ([`run`]), batched: every millisecond or every 64 identities.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::identity::hash::IdKey;
use crate::store::count::{CountOutcome, CountRequest};
use crate::store::fleet_remote::FleetRemote;
use crate::store::lease::{expiry, nth, size, Unspent};

const SHARDS: usize = 64;
/// A flush runs at once when this many refills wait.
const BATCH: usize = 64;

/// One grant: its first request's outcome, when it was made, until when it may be spent.
#[derive(Clone, Copy)]
struct Grant {
    first: CountOutcome,
    at_ms: u64,
    until_ms: u64,
    granted: u32,
    spent: u32,
}

impl Grant {
    fn live(&self, now: u64) -> bool {
        now >= self.at_ms && now < self.until_ms
    }
    fn left(&self) -> u32 {
        self.granted - self.spent
    }
}

/// One identity's leases.
struct Held {
    /// The request with its time zeroed: a grant serves only requests exactly like it.
    template: CountRequest,
    cur: Option<Grant>,
    next: Option<Grant>,
    refilling: bool,
    /// The next lease's size.
    k: u32,
}

fn template(req: &CountRequest) -> CountRequest {
    CountRequest { now_ms: 0, ..*req }
}

impl Held {
    fn at(&self, ms: u64) -> CountRequest {
        CountRequest {
            now_ms: ms,
            ..self.template
        }
    }
    /// Moves what `g` did not spend into `back`.
    fn unspent(&self, g: &Grant, back: &mut Vec<Unspent>) {
        let r = self.at(g.at_ms);
        back.extend(Unspent::of_all(&r, g.left()));
    }
    fn drain(&mut self, back: &mut Vec<Unspent>) {
        for g in [self.cur.take(), self.next.take()].into_iter().flatten() {
            self.unspent(&g, back);
        }
    }
}

/// What a request's lookup found.
#[allow(
    clippy::large_enum_variant,
    reason = "matched at once on the request path; boxing the local answer would allocate"
)]
pub enum Spend {
    /// Admitted from a grant held here.
    Local(CountOutcome),
    /// Ask the store for a lease of `want`, giving back `back` first.
    Remote { want: u32, back: Vec<Unspent> },
}

/// A request's identity held no live grant: the lease to ask for, and what to give back first.
pub struct Miss {
    pub want: u32,
    pub back: Vec<Unspent>,
}

/// Counters of the leases (tests, the bench).
#[derive(Debug, Default)]
pub struct LeaseStats {
    pub local: AtomicU64,
    pub grants: AtomicU64,
    pub refills: AtomicU64,
    pub given_back: AtomicU64,
}

pub struct Leases {
    shards: Box<[Mutex<HashMap<IdKey, Held>>]>,
    refills: Mutex<Vec<CountRequest>>,
    returns: Mutex<Vec<Unspent>>,
    wake: Notify,
    hosts: AtomicU32,
    max: u32,
    ttl_ms: u64,
    per_shard: usize,
    latest_ms: AtomicU64,
    in_flight: AtomicU32,
    pub stats: LeaseStats,
}

impl Leases {
    pub fn new(max: u32, ttl_ms: u64, max_identities: usize) -> Leases {
        Leases {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            refills: Mutex::new(Vec::new()),
            returns: Mutex::new(Vec::new()),
            wake: Notify::new(),
            hosts: AtomicU32::new(1),
            max: max.max(1),
            ttl_ms,
            per_shard: (max_identities / SHARDS).max(16),
            latest_ms: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            stats: LeaseStats::default(),
        }
    }

    fn shard(&self, id: &IdKey) -> &Mutex<HashMap<IdKey, Held>> {
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(id, &mut h);
        &self.shards[(std::hash::Hasher::finish(&h) as usize) % SHARDS]
    }

    /// The live host count last read from the store.
    pub fn hosts(&self) -> u32 {
        self.hosts.load(Ordering::Relaxed)
    }

    /// Spends one request of `req`'s grant if this host holds one that is live; else says
    /// what lease to ask for.
    pub fn spend(&self, req: &CountRequest) -> Spend {
        self.latest_ms.fetch_max(req.now_ms, Ordering::Relaxed);
        let mut shard = self.shard(&req.id).lock();
        let Some(h) = shard.get_mut(&req.id) else {
            return Spend::Remote {
                want: 1,
                back: Vec::new(),
            };
        };
        let mut back = Vec::new();
        if h.template != template(req) {
            h.drain(&mut back);
            h.template = template(req);
            h.k = 1;
            return Spend::Remote { want: 1, back };
        }
        loop {
            match h.cur {
                Some(ref mut g) if g.live(req.now_ms) && g.left() > 0 => {
                    let j = g.spent;
                    g.spent += 1;
                    let o = nth(&g.first, req, j, req.now_ms - g.at_ms);
                    let half = g.granted > 1 && g.spent * 2 >= g.granted;
                    if half && !h.refilling && h.next.is_none() {
                        h.refilling = true;
                        self.refills.lock().push(*req);
                        self.wake.notify_one();
                    }
                    self.stats.local.fetch_add(1, Ordering::Relaxed);
                    if !back.is_empty() {
                        self.give_back_later(back);
                    }
                    return Spend::Local(o);
                }
                Some(g) => {
                    h.unspent(&g, &mut back);
                    h.cur = h.next.take();
                }
                None => match h.next.take() {
                    Some(n) => h.cur = Some(n),
                    None => break,
                },
            }
            if h.cur.is_none() {
                break;
            }
        }
        Spend::Remote { want: h.k, back }
    }

    /// Installs a grant the request path received (`g` requests, the first spent by `req`).
    pub fn install(&self, req: &CountRequest, o: &CountOutcome, g: u32) {
        self.stats.grants.fetch_add(1, Ordering::Relaxed);
        let mut back = Vec::new();
        {
            let mut shard = self.shard(&req.id).lock();
            if shard.len() >= self.per_shard && !shard.contains_key(&req.id) {
                let now = req.now_ms;
                shard.retain(|_, h| {
                    let live = [h.cur, h.next].iter().flatten().any(|g| g.live(now));
                    if !live {
                        h.drain(&mut back);
                    }
                    live
                });
            }
            let h = shard.entry(req.id).or_insert_with(|| Held {
                template: template(req),
                cur: None,
                next: None,
                refilling: false,
                k: 1,
            });
            if h.template != template(req) {
                h.drain(&mut back);
                h.template = template(req);
            }
            let grant = (g >= 1).then(|| Grant {
                first: *o,
                at_ms: req.now_ms,
                until_ms: expiry(req, req.now_ms, self.ttl_ms),
                granted: g,
                spent: 1,
            });
            // Requests of one identity that missed at once each bring a grant: one that is
            // still live is kept (spent first), the new one queued behind it.
            match h.cur {
                Some(old) if old.live(req.now_ms) && old.left() > 0 && h.next.is_none() => {
                    h.next = grant;
                }
                _ => {
                    if let Some(old) = h.cur.take() {
                        h.unspent(&old, &mut back);
                    }
                    h.cur = grant;
                }
            }
            let outstanding = g.saturating_sub(1) + h.next.map_or(0, |n| n.left());
            h.k = if g == 0 {
                1
            } else {
                size(o, req, outstanding, self.hosts(), self.max)
            };
        }
        if !back.is_empty() {
            self.give_back_later(back);
        }
    }

    /// Installs a refill's grant (none spent yet).
    fn install_refill(&self, req: &CountRequest, o: &CountOutcome, g: u32) {
        self.stats.refills.fetch_add(1, Ordering::Relaxed);
        let mut back = Vec::new();
        {
            let mut shard = self.shard(&req.id).lock();
            let grant = Grant {
                first: *o,
                at_ms: req.now_ms,
                until_ms: expiry(req, req.now_ms, self.ttl_ms),
                granted: g,
                spent: 0,
            };
            match shard.get_mut(&req.id) {
                Some(h) if h.template == template(req) && h.next.is_none() => {
                    h.refilling = false;
                    if g == 0 {
                        h.k = 1;
                    } else {
                        let outstanding = g + h.cur.map_or(0, |c| c.left());
                        h.k = size(o, req, outstanding, self.hosts(), self.max);
                        h.next = Some(grant);
                    }
                }
                _ => back.extend(Unspent::of_all(req, g)),
            }
        }
        if !back.is_empty() {
            self.give_back_later(back);
        }
    }

    /// Queues `back` for the background task.
    pub fn give_back_later(&self, back: Vec<Unspent>) {
        self.stats
            .given_back
            .fetch_add(back.len() as u64, Ordering::Relaxed);
        self.returns.lock().extend(back);
        self.wake.notify_one();
    }

    /// Everything held, given back (the host stops).
    pub fn surrender(&self) {
        let mut back = Vec::new();
        for s in self.shards.iter() {
            for h in s.lock().values_mut() {
                h.drain(&mut back);
            }
        }
        self.give_back_later(back);
    }

    /// Grants expired unspent by `now_ms`, given back; identities idle past a minute dropped.
    fn sweep(&self, now_ms: u64) {
        let mut back = Vec::new();
        for s in self.shards.iter() {
            s.lock().retain(|_, h| {
                for slot in [&mut h.cur, &mut h.next] {
                    if let Some(g) = slot.filter(|g| !g.live(now_ms)) {
                        *slot = None;
                        let r = CountRequest {
                            now_ms: g.at_ms,
                            ..h.template
                        };
                        back.extend(Unspent::of_all(&r, g.left()));
                    }
                }
                let last = h.cur.or(h.next).map_or(0, |g| g.at_ms);
                h.cur.is_some() || h.next.is_some() || now_ms.saturating_sub(last) < 60_000
            });
        }
        if !back.is_empty() {
            self.give_back_later(back);
        }
    }

    /// Give-backs queued or being sent.
    pub fn pending(&self) -> usize {
        self.returns.lock().len() + self.in_flight.load(Ordering::Acquire) as usize
    }

    /// Requests this host holds granted and unspent now (tests: the outage bound).
    pub fn held(&self, now_ms: u64) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .values()
                    .flat_map(|h| [h.cur, h.next])
                    .flatten()
                    .filter(|g| g.live(now_ms))
                    .map(|g| u64::from(g.left()))
                    .sum::<u64>()
            })
            .sum()
    }
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The background task: refills, give-backs, the heartbeat and the sweep, until `cancel`.
pub async fn run(leases: Arc<Leases>, remote: Arc<dyn FleetRemote>, cancel: CancellationToken) {
    let mut tick = tokio::time::Instant::now();
    loop {
        let wait = tick.saturating_duration_since(tokio::time::Instant::now());
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = leases.wake.notified() => {
                if leases.refills.lock().len() < BATCH {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            _ = tokio::time::sleep(wait) => {}
        }
        if tokio::time::Instant::now() >= tick {
            tick = tokio::time::Instant::now() + Duration::from_secs(1);
            if let Ok(n) = remote.heartbeat_async(wall_ms()).await {
                leases.hosts.store(n, Ordering::Relaxed);
            }
            leases.sweep(leases.latest_ms.load(Ordering::Relaxed));
        }
        let refills: Vec<CountRequest> = std::mem::take(&mut *leases.refills.lock());
        let returns: Vec<Unspent> = std::mem::take(&mut *leases.returns.lock());
        leases
            .in_flight
            .fetch_add(u32::from(!returns.is_empty()), Ordering::AcqRel);
        let want = |r: &CountRequest| {
            let s = leases.shard(&r.id).lock();
            s.get(&r.id).map_or(1, |h| h.k)
        };
        let asks = refills.iter().map(|r| {
            let w = want(r);
            let remote = &remote;
            async move { (r, remote.lease_async(*r, w, true, Vec::new()).await) }
        });
        let back = async {
            if !returns.is_empty() {
                let r = remote.give_back_async(returns).await;
                leases.in_flight.fetch_sub(1, Ordering::AcqRel);
                if let Err(e) = r {
                    tracing::debug!(error = %e, "lease give-back failed (the counts expire)");
                }
            }
        };
        let (answers, ()) =
            futures_util::future::join(futures_util::future::join_all(asks), back).await;
        for (r, a) in answers {
            match a {
                Ok((o, g)) => leases.install_refill(r, &o, g),
                Err(_) => {
                    if let Some(h) = leases.shard(&r.id).lock().get_mut(&r.id) {
                        h.refilling = false;
                    }
                }
            }
        }
    }
}
