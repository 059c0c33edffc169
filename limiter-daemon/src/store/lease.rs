//! Leases, the reference model: a host asks the store for `want` requests of one holder's
//! budget at once, in every window of the holder (burst, hourly, daily, key hourly), and then
//! admits that many requests locally. [`grant`] is the semantics (the Valkey script
//! `check_and_count.lua` implements it with `want`): the first request is checked and counted
//! exactly as [`apply`] does; when it is admitted, `g − 1` more are counted at once, where
//! `g = min(want, what every refusing window still allows)`. So the store never counts past a
//! limit, and what a fleet admits is at most what the store granted: zero over-admission by
//! construction.
//!
//! The bounds a lease keeps (docs/fleet.md):
//! - a grant is spent only while the windows it was counted in still count it ([`expiry`]):
//!   the burst's 5 s slot, the hour, the day, and at most `ttl` — units are never carried into
//!   another slot or window, so the burst's "at most N in any 60 s" holds exactly too;
//! - what a grant did not spend is given back into the same counters ([`Unspent`]), so a
//!   window under-admits by at most the grants outstanding: hosts × k;
//! - `k` shrinks with the budget left ([`size`]): near a limit every decision is one exact
//!   script again, and a cold identity's first request is a lease of 1.

use super::count::{apply, CountOutcome, CountRequest, Entry, Limit, NET_LEVELS};
use super::windows::{self, BURST_SLOT_MS};
use crate::identity::hash::IdKey;
use crate::model::{PerWindow, Shape, WindowKind};

pub use crate::config::store::{DEFAULT_LEASE_MAX as DEFAULT_MAX, LEASE_TTL_MS as DEFAULT_TTL_MS};
/// Each host may take at most 1/(hosts × SHARE) of what is left in one lease.
pub const SHARE: u32 = 2;

/// Grants `req`'s holder a lease of up to `want` requests in `e`: the first request's
/// outcome, and `g`, the requests granted (0: refused, counted as [`apply`] counts a refusal).
pub fn grant(e: &mut Entry, req: &CountRequest, want: u32) -> (CountOutcome, u32) {
    let first = apply(e, req);
    if !first.admitted {
        return (first, 0);
    }
    let more = room(&first, &req.limits, req.cost).min(want.max(1) - 1);
    for _ in 0..more {
        let o = apply(e, req);
        debug_assert!(o.admitted, "room said so");
    }
    (first, 1 + more)
}

/// Requests every refusing window in `limits` still allows after `o` (u32::MAX: none refuses).
fn room(o: &CountOutcome, limits: &PerWindow<Option<Limit>>, cost: u32) -> u32 {
    let mut r = u32::MAX;
    for (k, limit) in limits.iter() {
        let (Some(l), Some(w)) = (limit, o.uses[k]) else {
            continue;
        };
        if l.refuse {
            r = r.min(w.remaining() / k.spec().counts.per_request(cost).max(1));
        }
    }
    r
}

/// The next lease's size for `req` after outcome `o`, with `outstanding` requests already
/// granted to this host and not spent: `clamp((left − outstanding) / (hosts × SHARE), 1, max)`
/// over the caller and its networks, so `k` shrinks as the budget does and `hosts` leases
/// together never take more than half of what is left.
pub fn size(o: &CountOutcome, req: &CountRequest, outstanding: u32, hosts: u32, max: u32) -> u32 {
    let mut left = room(o, &req.limits, req.cost);
    for (i, n) in req.networks.iter().enumerate() {
        if let (Some(n), Some(u)) = (n, o.networks[i]) {
            let as_outcome = CountOutcome { uses: u.uses, ..*o };
            left = left.min(room(&as_outcome, &n.limits, req.cost));
        }
    }
    let share = hosts.max(1).saturating_mul(SHARE);
    (left.saturating_sub(outstanding) / share).clamp(1, max.max(1))
}

/// Until when a grant made at `now_ms` for `req` may be spent: its burst slot's end (when any
/// holder has a burst), every fixed window's rollover, and at most `ttl_ms`.
pub fn expiry(req: &CountRequest, now_ms: u64, ttl_ms: u64) -> u64 {
    let until = now_ms + ttl_ms.clamp(1, DEFAULT_TTL_MS);
    until.min(windows_of(req, now_ms).1)
}

/// From when a grant made at `now_ms` for `req` may be spent: the latest start of the windows
/// it was counted in. A request stamped a little before the grant (another thread read the
/// clock first) falls in the same slot, hour and day, so the grant counts it exactly.
pub fn start(req: &CountRequest, now_ms: u64) -> u64 {
    windows_of(req, now_ms).0
}

/// The span `[start, end)` inside which every window of every holder of `req` that applies
/// is the one `now_ms` falls in.
fn windows_of(req: &CountRequest, now_ms: u64) -> (u64, u64) {
    let (mut from, mut until) = (0, u64::MAX);
    let holders =
        std::iter::once(&req.limits).chain(req.networks.iter().flatten().map(|n| &n.limits));
    for limits in holders {
        for (k, limit) in limits.iter() {
            if limit.is_none() {
                continue;
            }
            let len = match k.spec().shape {
                Shape::Sliding => BURST_SLOT_MS,
                Shape::Fixed => k.spec().span_ms,
            };
            let end = now_ms + windows::until_rollover(now_ms, len);
            until = until.min(end);
            from = from.max(end - len);
        }
    }
    (from, until)
}

/// The outcome the `j`-th request (0-based) of a grant sees, from the first's: each window
/// `j` requests further on, its reset `now − granted_at` nearer.
pub fn nth(first: &CountOutcome, req: &CountRequest, j: u32, since_ms: u64) -> CountOutcome {
    let shift = |uses: &mut PerWindow<Option<crate::store::WindowUse>>| {
        for (i, w) in uses.0.iter_mut().enumerate() {
            if let Some(w) = w {
                let add = WindowKind::ALL[i].spec().counts.per_request(req.cost);
                w.used = w.used.saturating_add(add.saturating_mul(j));
                w.reset_ms = w.reset_ms.saturating_sub(since_ms).max(1);
            }
        }
    };
    let mut o = *first;
    shift(&mut o.uses);
    for n in o.networks.iter_mut().flatten() {
        shift(&mut n.uses);
    }
    o
}

/// What one holder of a grant gives back: `burst` requests from the burst slot the grant was
/// counted in, and `requests` requests' units from its fixed windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unspent {
    pub id: IdKey,
    /// When the grant was made (its slot, hour and day).
    pub at_ms: u64,
    pub cost: u32,
    pub limits: PerWindow<Option<Limit>>,
    pub burst: u32,
    pub requests: u32,
}

impl Unspent {
    /// Every holder of `req` (granted at `req.now_ms`) giving back `n` requests.
    pub fn of_all(req: &CountRequest, n: u32) -> impl Iterator<Item = Unspent> + '_ {
        let holders = std::iter::once((req.id, req.limits))
            .chain(req.networks.iter().flatten().map(|h| (h.id, h.limits)));
        holders
            .map(move |(id, limits)| Unspent::one(id, req, limits, n, n))
            .filter(move |_| n > 0)
    }

    pub fn one(
        id: IdKey,
        req: &CountRequest,
        limits: PerWindow<Option<Limit>>,
        burst: u32,
        requests: u32,
    ) -> Unspent {
        Unspent {
            id,
            at_ms: req.now_ms,
            cost: req.cost,
            limits,
            burst,
            requests,
        }
    }

    /// Units given back in window `k` (0 where the window does not apply).
    pub fn units(&self, k: WindowKind) -> u32 {
        if self.limits[k].is_none() {
            return 0;
        }
        match k.spec().shape {
            Shape::Sliding => self.burst,
            Shape::Fixed => self
                .requests
                .saturating_mul(k.spec().counts.per_request(self.cost)),
        }
    }
}

/// Number of holders a request can have: the caller and its networks.
pub const HOLDERS: usize = 1 + NET_LEVELS;

/// One lease ask per holder of a request (index 0 the caller, then its networks by level):
/// the holder's own request and the requests wanted; `None`: not asked.
pub type Asks = [Option<(CountRequest, u32)>; HOLDERS];
/// The store's answer to [`Asks`], holder by holder: the holder's first-request outcome and
/// the requests it granted (0: refused).
pub type Grants = [Option<(CountOutcome, u32)>; HOLDERS];

/// `req`'s holders, each as a request of its own (the caller without its networks, then each
/// network): leases are held per holder, so a network's grant on a host serves every caller
/// in it, and the callers of one network never tie up its budget in shares of their own.
pub fn holders(req: &CountRequest) -> [Option<CountRequest>; HOLDERS] {
    let mut h = [None; HOLDERS];
    h[0] = Some(req.caller_only());
    for (i, slot) in h.iter_mut().skip(1).enumerate() {
        *slot = req.for_network(i);
    }
    h
}
