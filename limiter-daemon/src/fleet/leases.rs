//! This host's leases ([`crate::store::lease`]), held per holder (a caller, a network): the
//! grant being spent and the refill behind it, spent on the request path without I/O. A
//! request is answered here when each of its holders holds a live grant; a network's grant
//! serves every caller of that network on this host. Refills (asked when half a grant is
//! spent), give-backs of what expired unspent, and the fleet's host count are the work of one
//! background task ([`run`]), batched: every millisecond or every 64 holders.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::over_limit::OverLimit;
use crate::identity::hash::IdKey;
use crate::store::count::{combine, CountOutcome, CountRequest};
use crate::store::lease::{expiry, holders, nth, size, start, Asks, Grants, Unspent, HOLDERS};

const SHARDS: usize = 64;
/// A flush runs at once when this many refills wait.
pub(super) const BATCH: usize = 64;
/// An ask for a lease older than this (request time) no longer holds other requests of its
/// identity to leases of one: its answer was lost (a timeout), or the clock jumped.
const ASK_STALE_MS: u64 = 2_000;
/// The background task's calls give up after this: a frozen store must not stall the refills
/// and give-backs behind it (a refill lost is units the window under-admits, never over).
pub(super) const BACKGROUND_TIMEOUT: Duration = Duration::from_secs(2);

/// One grant: its first request's outcome, when it was made, and the span in which it may be
/// spent (inside the windows it was counted in, at most the lease TTL past it).
#[derive(Clone, Copy)]
struct Grant {
    first: CountOutcome,
    at_ms: u64,
    from_ms: u64,
    until_ms: u64,
    granted: u32,
    spent: u32,
}

impl Grant {
    fn live(&self, now: u64) -> bool {
        now >= self.from_ms && now < self.until_ms
    }
    fn left(&self) -> u32 {
        self.granted - self.spent
    }
}

/// One holder's leases.
pub(super) struct Held {
    /// The request with its time zeroed: a grant serves only requests exactly like it.
    template: CountRequest,
    cur: Option<Grant>,
    next: Option<Grant>,
    pub(super) refilling: bool,
    /// The request time of this host's ask for a lease of more than one, while it is in
    /// flight: the identity's other misses meanwhile ask for exactly themselves, so one host
    /// never holds more than one lease's worth of an identity's budget being asked for at once
    /// (with 16 threads missing together, 16 leases of `k` tied up the budget, and other hosts
    /// were refused what these would give back later).
    asking: Option<u64>,
    /// The next lease's size.
    pub(super) k: u32,
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
    /// Admitted from grants held here, one for each holder (what was taken, in the miss).
    Local(CountOutcome, Miss),
    /// Some holder held no live grant: ask the store.
    Remote(Miss),
}

/// A request some of whose holders held no live grant: what to ask the store for, the units
/// already taken here from the holders that held one, and what to give back first.
pub struct Miss {
    /// `req`'s holders, each as its own request.
    pub holders: [Option<CountRequest>; HOLDERS],
    pub asks: Asks,
    /// Per holder, the outcome of the unit taken here (its own request's view).
    pub taken: [Option<CountOutcome>; HOLDERS],
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
    pub(super) shards: Box<[Mutex<HashMap<IdKey, Held>>]>,
    pub(super) refills: Mutex<Vec<CountRequest>>,
    pub(super) returns: Mutex<Vec<Unspent>>,
    pub(super) wake: Notify,
    pub(super) hosts: AtomicU32,
    pub(super) max: u32,
    pub(super) ttl_ms: u64,
    pub(super) per_shard: usize,
    pub(super) latest_ms: AtomicU64,
    pub(super) in_flight: AtomicU32,
    /// Per holder, the give-backs queued or in flight: a refusal of a holder waits only for
    /// its own ([`Leases::refill_waits`]). Waiting on every give-back of the host, a refused
    /// request under steady traffic (give-backs always on their way) waited out its deadline.
    pub(super) returning: Mutex<HashMap<IdKey, u32>>,
    /// The store's held refusals: a holder given back units is asked again, not refused
    /// from the cache while the units it gave back sit in the store.
    pub(super) over_limit: Arc<OverLimit>,
    /// Refill batches landed: a request refused while its holder's refill was in flight
    /// waits for it ([`Leases::refill_waits`]).
    pub(super) landed: Mutex<u64>,
    pub(super) landed_cv: parking_lot::Condvar,
    pub(super) landed_async: Notify,
    pub stats: LeaseStats,
}

impl Leases {
    pub fn new(max: u32, ttl_ms: u64, max_identities: usize, over_limit: Arc<OverLimit>) -> Leases {
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
            returning: Mutex::new(HashMap::new()),
            over_limit,
            landed: Mutex::new(0),
            landed_cv: parking_lot::Condvar::new(),
            landed_async: Notify::new(),
            stats: LeaseStats::default(),
        }
    }

    pub(super) fn shard(&self, id: &IdKey) -> &Mutex<HashMap<IdKey, Held>> {
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(id, &mut h);
        &self.shards[(std::hash::Hasher::finish(&h) as usize) % SHARDS]
    }

    /// The live host count last read from the store.
    pub fn hosts(&self) -> u32 {
        self.hosts.load(Ordering::Relaxed)
    }

    /// Spends one request of each of `req`'s holders from the grants this host holds, if
    /// every holder holds a live one; else says what to ask the store for (the holders that
    /// held one keep the unit taken, in [`Miss::taken`]).
    pub fn spend(&self, req: &CountRequest) -> Spend {
        self.latest_ms.fetch_max(req.now_ms, Ordering::Relaxed);
        let mut miss = Miss {
            holders: holders(req),
            asks: [None; HOLDERS],
            taken: [None; HOLDERS],
            back: Vec::new(),
        };
        for (i, h) in miss.holders.iter().enumerate() {
            if let Some(h) = h {
                match self.take(h, &mut miss.back) {
                    Ok(o) => miss.taken[i] = Some(o),
                    Err(want) => miss.asks[i] = Some((*h, want)),
                }
            }
        }
        if miss.asks.iter().all(Option::is_none) {
            self.stats.local.fetch_add(1, Ordering::Relaxed);
            if !miss.back.is_empty() {
                self.give_back_later(std::mem::take(&mut miss.back));
            }
            let o = compose(req, &miss.taken, &[None; HOLDERS]);
            return Spend::Local(o, miss);
        }
        Spend::Remote(miss)
    }

    /// One request of holder `h` from a live grant held here, asking nothing.
    pub(super) fn take_held(
        &self,
        h: &CountRequest,
        back: &mut Vec<Unspent>,
    ) -> Option<CountOutcome> {
        let mut shard = self.shard(&h.id).lock();
        let held = shard.get_mut(&h.id)?;
        (held.template == template(h))
            .then(|| self.spend_held(held, h, back))
            .flatten()
    }

    /// One request of holder `h` (its own request) from its live grant here: that request's
    /// outcome, or the lease to ask for. What expired goes to `back`.
    fn take(&self, h: &CountRequest, back: &mut Vec<Unspent>) -> Result<CountOutcome, u32> {
        let mut shard = self.shard(&h.id).lock();
        let Some(held) = shard.get_mut(&h.id) else {
            return Err(1);
        };
        if held.template != template(h) {
            held.drain(back);
            held.template = template(h);
            held.k = 1;
            held.asking = None;
            return Err(1);
        }
        if let Some(o) = self.spend_held(held, h, back) {
            return Ok(o);
        }
        let asked = held
            .asking
            .is_some_and(|t| h.now_ms.abs_diff(t) < ASK_STALE_MS);
        let want = if held.k > 1 && asked { 1 } else { held.k };
        if want > 1 {
            held.asking = Some(h.now_ms);
        }
        Err(want)
    }

    /// Spends one request of `held`'s live grant for `h`, moving to the queued grant when the
    /// current one is spent or expired (what it left goes to `back`); a refill is queued at
    /// half spent.
    fn spend_held(
        &self,
        held: &mut Held,
        h: &CountRequest,
        back: &mut Vec<Unspent>,
    ) -> Option<CountOutcome> {
        loop {
            match held.cur {
                Some(ref mut g) if g.live(h.now_ms) && g.left() > 0 => {
                    let j = g.spent;
                    g.spent += 1;
                    let o = nth(&g.first, h, j, h.now_ms.saturating_sub(g.at_ms));
                    let half = g.granted > 1 && g.spent * 2 >= g.granted;
                    if half && !held.refilling && held.next.is_none() {
                        held.refilling = true;
                        self.refills.lock().push(*h);
                        self.wake.notify_one();
                    }
                    return Some(o);
                }
                Some(g) => {
                    held.unspent(&g, back);
                    held.cur = held.next.take();
                }
                None => {
                    held.cur = Some(held.next.take()?);
                }
            }
            held.cur?;
        }
    }

    /// Settles the store's answer to `miss` for `req`: the combined outcome of the holders'
    /// units (taken here or granted now), to be admitted if every holder admitted it.
    pub fn outcome(&self, req: &CountRequest, miss: &Miss, grants: &Grants) -> CountOutcome {
        compose(req, &miss.taken, grants)
    }

    /// The request was admitted: each grant the store made is installed here (its first
    /// request spent by `req`).
    pub fn admitted(&self, miss: &Miss, grants: &Grants) {
        for (i, (h, want)) in miss
            .asks
            .iter()
            .enumerate()
            .filter_map(|(i, a)| Some((i, (*a)?)))
        {
            if let Some((o, g)) = grants[i] {
                self.install(&h, &o, g, want);
            } else {
                self.ask_failed(&h, want);
            }
        }
    }

    /// The request was refused (by a holder, or by this host's burst): what it took here and
    /// what the store granted it go back, all but the arrival the burst counts.
    pub fn refused(&self, miss: &Miss, grants: &Grants) {
        let mut back = Vec::new();
        for (taken, h) in miss.taken.iter().zip(&miss.holders) {
            if let (Some(_), Some(h)) = (taken, h) {
                back.push(Unspent::one(h.id, h, h.limits, 0, 1));
            }
        }
        for (i, (h, want)) in miss
            .asks
            .iter()
            .enumerate()
            .filter_map(|(i, a)| Some((i, (*a)?)))
        {
            match grants[i] {
                Some((o, g)) if g > 0 => {
                    back.push(Unspent::one(h.id, &h, h.limits, g - 1, g));
                    self.install(&h, &o, 0, want);
                }
                Some((o, _)) => self.install(&h, &o, 0, want),
                None => self.ask_failed(&h, want),
            }
        }
        if !back.is_empty() {
            self.give_back_later(back);
        }
    }

    /// The store did not answer `miss`: the units taken here go back (the fallback counts the
    /// request on its own), and every ask may be made again.
    pub fn failed(&self, miss: Miss) {
        let mut back = miss.back;
        for (taken, h) in miss.taken.iter().zip(&miss.holders) {
            if let (Some(_), Some(h)) = (taken, h) {
                back.push(Unspent::one(h.id, h, h.limits, 1, 1));
            }
        }
        for (h, want) in miss.asks.iter().flatten() {
            self.ask_failed(h, *want);
        }
        if !back.is_empty() {
            self.give_back_later(back);
        }
    }

    /// An ask of holder `h` for a lease of `want` got no grant to install: its next miss may
    /// ask again.
    pub(super) fn ask_failed(&self, h: &CountRequest, want: u32) {
        if want > 1 {
            if let Some(held) = self.shard(&h.id).lock().get_mut(&h.id) {
                held.asking = None;
            }
        }
    }

    /// Installs a grant holder `h`'s request received for an ask of `want` (`g` requests, the
    /// first spent by the request).
    fn install(&self, h: &CountRequest, o: &CountOutcome, g: u32, want: u32) {
        self.stats.grants.fetch_add(1, Ordering::Relaxed);
        let mut back = Vec::new();
        {
            let mut shard = self.shard(&h.id).lock();
            if shard.len() >= self.per_shard && !shard.contains_key(&h.id) {
                let now = h.now_ms;
                shard.retain(|_, held| {
                    let live = [held.cur, held.next].iter().flatten().any(|g| g.live(now));
                    if !live {
                        held.drain(&mut back);
                    }
                    live
                });
            }
            let held = shard.entry(h.id).or_insert_with(|| Held {
                template: template(h),
                cur: None,
                next: None,
                refilling: false,
                asking: None,
                k: 1,
            });
            if held.template != template(h) {
                held.drain(&mut back);
                held.template = template(h);
            }
            if want > 1 {
                held.asking = None;
            }
            let grant = (g >= 1).then(|| Grant {
                first: *o,
                at_ms: h.now_ms,
                from_ms: start(h, h.now_ms),
                until_ms: expiry(h, h.now_ms, self.ttl_ms),
                granted: g,
                spent: 1,
            });
            // Requests of one holder that missed at once each bring a grant: one that is
            // still live is kept (spent first), the new one queued behind it, or given back
            // when a grant is queued already. A grant of one was spent by its request and
            // holds nothing: it leaves what is held alone.
            let live = |g: &Option<Grant>| g.is_some_and(|g| g.live(h.now_ms) && g.left() > 0);
            match grant {
                None if live(&held.cur) => {}
                Some(new) if new.left() == 0 && live(&held.cur) => {}
                Some(new) if live(&held.cur) && live(&held.next) => {
                    let r = held.at(new.at_ms);
                    back.extend(Unspent::of_all(&r, new.left()));
                }
                Some(new) if live(&held.cur) => {
                    if let Some(old) = held.next.take() {
                        held.unspent(&old, &mut back);
                    }
                    held.next = Some(new);
                }
                _ => {
                    if let Some(old) = held.cur.take() {
                        held.unspent(&old, &mut back);
                    }
                    held.cur = grant;
                }
            }
            let outstanding = g.saturating_sub(1) + held.next.map_or(0, |n| n.left());
            held.k = if g == 0 {
                1
            } else {
                size(o, h, outstanding, self.hosts(), self.max)
            };
        }
        if !back.is_empty() {
            self.give_back_later(back);
        }
    }

    /// Installs a refill's grant (none spent yet).
    pub(super) fn install_refill(&self, req: &CountRequest, o: &CountOutcome, g: u32) {
        self.stats.refills.fetch_add(1, Ordering::Relaxed);
        let mut back = Vec::new();
        {
            let mut shard = self.shard(&req.id).lock();
            let grant = Grant {
                first: *o,
                at_ms: req.now_ms,
                from_ms: start(req, req.now_ms),
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
                Some(h) => {
                    // A grant queued meanwhile (a miss of this holder brought it): the refill
                    // goes back, and the holder may refill again, or it would never refill
                    // and a refusal of it would wait out its deadline for this one.
                    h.refilling = false;
                    back.extend(Unspent::of_all(req, g));
                }
                None => back.extend(Unspent::of_all(req, g)),
            }
        }
        if !back.is_empty() {
            self.give_back_later(back);
        }
    }

    /// Whether `req`'s caller holds a live grant with requests left here.
    pub fn holds(&self, req: &CountRequest) -> bool {
        self.shard(&req.id).lock().get(&req.id).is_some_and(|h| {
            h.template == template(&req.caller_only())
                && [h.cur, h.next]
                    .iter()
                    .flatten()
                    .any(|g| g.live(req.now_ms) && g.left() > 0)
        })
    }

    /// Queues `back` for the background task.
    pub fn give_back_later(&self, back: Vec<Unspent>) {
        for u in &back {
            self.over_limit.forget(&u.id);
        }
        self.stats
            .given_back
            .fetch_add(back.len() as u64, Ordering::Relaxed);
        {
            let mut returning = self.returning.lock();
            for u in &back {
                *returning.entry(u.id).or_default() += 1;
            }
        }
        self.returns.lock().extend(back);
        self.wake.notify_one();
    }

    /// Give-backs of `ids` landed (or failed): no longer on their way.
    pub(super) fn returned(&self, ids: &[IdKey]) {
        let mut returning = self.returning.lock();
        for id in ids {
            if let std::collections::hash_map::Entry::Occupied(mut e) = returning.entry(*id) {
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    e.remove();
                }
            }
        }
    }

    /// Whether give-backs of holder `id` are queued or in flight.
    pub(super) fn returning(&self, id: &IdKey) -> bool {
        self.returning.lock().contains_key(id)
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
    pub(super) fn sweep(&self, now_ms: u64) {
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
        let queue = self.returns.lock();
        queue.len() + self.in_flight.load(Ordering::Acquire) as usize
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

/// The outcome of a request whose holders' units were taken here (`taken`) or granted by the
/// store (`grants`), as one decision's: admitted only if every holder admitted it.
fn compose(
    req: &CountRequest,
    taken: &[Option<CountOutcome>; HOLDERS],
    grants: &Grants,
) -> CountOutcome {
    let of = |i: usize| taken[i].or(grants[i].map(|(o, _)| o));
    let caller = of(0).expect("the caller is a holder of every request");
    combine(req, caller, [of(1), of(2)]).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PerWindow, WindowKind};
    use crate::store::count::{apply, Entry, Limit};
    use crate::store::lease::grant;

    fn req(now_ms: u64) -> CountRequest {
        let limits = PerWindow::default()
            .with(WindowKind::Burst, Some(Limit::refusing(1_000)))
            .with(WindowKind::Hourly, Some(Limit::refusing(10_000)));
        CountRequest::new(IdKey::from_prefix(&[7; 10]), now_ms, 1, limits)
    }

    fn leases() -> Leases {
        Leases::new(16, 5_000, 1_000, Arc::new(OverLimit::new(100)))
    }

    /// A miss of `r` answered by the store (`e`) with a grant of up to `want`, admitted.
    fn ask(l: &Leases, e: &mut Entry, r: &CountRequest, want: u32) {
        let Spend::Remote(m) = l.spend(r) else {
            panic!("a miss")
        };
        let (o, g) = grant(e, r, want);
        let mut grants: Grants = [None; HOLDERS];
        grants[0] = Some((o, g));
        let mut m = m;
        m.asks[0] = Some((m.holders[0].unwrap(), want));
        l.admitted(&m, &grants);
    }

    /// A refill that lands behind a grant a miss queued meanwhile is given back, and the
    /// holder may refill again: left `refilling`, it never refilled, and a refusal of it
    /// waited out its deadline for a refill that would never land.
    #[test]
    fn a_refill_landing_behind_a_queued_grant_leaves_the_holder_free_to_refill() {
        let l = leases();
        let mut e = Entry::default();
        let t = 3_600_000 * 10 + 1_000;
        ask(&l, &mut e, &req(t), 8);
        while l.refills.lock().is_empty() {
            let Spend::Local(..) = l.spend(&req(t)) else {
                panic!("spent here until half")
            };
        }
        assert!(l.busy(), "a refill is queued");
        let refill = l.refills.lock().pop().unwrap();
        // Another request's grant lands first and is queued behind the current one.
        let mut m = match l.spend(&req(t)) {
            Spend::Local(_, m) => m,
            Spend::Remote(m) => m,
        };
        let (o, g) = grant(&mut e, &req(t), 4);
        let mut grants: Grants = [None; HOLDERS];
        grants[0] = Some((o, g));
        m.asks[0] = Some((m.holders[0].unwrap(), 4));
        m.taken = [None; HOLDERS];
        l.admitted(&m, &grants);
        let o = apply(&mut e, &refill);
        l.install_refill(&refill, &o, 4);
        assert!(
            !l.shards
                .iter()
                .any(|s| s.lock().values().any(|h| h.refilling)),
            "the holder may refill again"
        );
        assert!(
            l.returns
                .lock()
                .iter()
                .any(|u| u.requests == 4 && u.burst == 4),
            "the refill's 4 go back"
        );
    }

    fn other(now_ms: u64) -> CountRequest {
        CountRequest {
            id: IdKey::from_prefix(&[8; 10]),
            ..req(now_ms)
        }
    }

    /// A request the store refused waits for give-backs of its own holder on their way, not
    /// for every give-back of the host: under steady traffic some are always on their way, and
    /// a refusal waited out its deadline (the open loop's p99 in `bench fleet`).
    #[test]
    fn a_refusal_waits_for_its_own_holders_give_backs_only() {
        let l = leases();
        let t = 3_600_000 * 10 + 1_000;
        let r = req(t);
        let Spend::Remote(mut m) = l.spend(&r) else {
            panic!("a miss")
        };
        m.asks[0] = Some((m.holders[0].unwrap(), 1));
        let o = apply(&mut Entry::default(), &r);
        let mut refused: Grants = [None; HOLDERS];
        refused[0] = Some((o, 0));
        assert!(!l.refill_waits(&m, &refused), "nothing on its way");

        l.give_back_later(Unspent::of_all(&other(t), 3).collect());
        assert!(l.pending() > 0);
        assert!(
            !l.refill_waits(&m, &refused),
            "another holder's give-backs free nothing it was refused"
        );

        l.give_back_later(Unspent::of_all(&r, 2).collect());
        assert!(l.refill_waits(&m, &refused), "its own are on their way");
        let mut admitted = refused;
        admitted[0] = Some((o, 1));
        assert!(
            !l.refill_waits(&m, &admitted),
            "an admitted request waits for nothing"
        );

        // The background task sends them and they land.
        let ids: Vec<IdKey> = std::mem::take(&mut *l.returns.lock())
            .iter()
            .map(|u| u.id)
            .collect();
        l.returned(&ids);
        assert!(!l.refill_waits(&m, &refused), "landed");
    }
}
