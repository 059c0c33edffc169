//! One atomic check-and-count: the single operation a store performs per decision. It checks
//! every window of one identity and, only if none refuses, counts the request in all of them.
//! A refused request consumes no budget; only windows that count every arrival
//! ([`WindowSpec::counts_refused`]: the burst) count it anyway, so a caller hammering a spent
//! budget still fills its burst window and a caller at or below its burst rate never does.
//!
//! [`apply`] is the reference semantics on one identity's [`Entry`], a loop over the window
//! table ([`crate::model::WINDOWS`]): a window refuses when what it would hold after the request
//! is over its limit ([`WindowSpec::refuses`]), and counts one per request or the route's cost
//! ([`crate::model::Counts`]). The embedded store calls it under a shard lock, and a Valkey
//! backend implements the same steps in one script.

use super::windows::{self, BurstRing, Fixed};
use crate::identity::hash::IdKey;
use crate::model::{PerWindow, Shape, WindowKind, WindowSpec};

/// One window's limit for this request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub max: u32,
    /// `true`: over `max` refuses. `false` (the daily quota in delay mode): always counts; the
    /// engine turns the count into a delay.
    pub refuse: bool,
}

impl Limit {
    /// A limit that refuses over `max`.
    pub fn refusing(max: u32) -> Limit {
        Limit { max, refuse: true }
    }
}

/// What to check and count for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountRequest {
    pub id: IdKey,
    pub now_ms: u64,
    /// Units for the windows that count units (burst counts requests).
    pub cost: u32,
    /// The windows that apply, with their limits (`None`: not checked, not counted).
    pub limits: PerWindow<Option<Limit>>,
}

/// One window after the operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowUse {
    pub limit: u32,
    /// Count after this request when the window counted it (admitted, or a window that counts
    /// refused requests too), else before it.
    pub used: u32,
    /// Milliseconds until the window frees capacity (fixed windows: until rollover).
    pub reset_ms: u64,
}

impl WindowUse {
    pub fn remaining(&self) -> u32 {
        self.limit.saturating_sub(self.used)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountOutcome {
    /// No window refused: the request was counted in every window that applies.
    pub admitted: bool,
    /// Which windows refused (several may).
    pub refused: PerWindow<bool>,
    /// The windows that applied.
    pub uses: PerWindow<Option<WindowUse>>,
}

impl CountOutcome {
    /// The windows that refused, in [`WindowKind::ALL`] order.
    pub fn refusing(&self) -> impl Iterator<Item = WindowKind> + '_ {
        self.refused.iter().filter(|(_, r)| **r).map(|(k, _)| k)
    }
}

/// Every window of one identity: 52 bytes (the compact windows of [`super::windows`]), so a
/// million identities fit in about 80 MB with their keys and the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    pub burst: BurstRing,
    pub hour: Fixed,
    pub day: Fixed,
    pub key_hour: Fixed,
    /// Seconds since the epoch of the last operation (for eviction order).
    pub last_seen_s: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 52);

/// A window's counter in an [`Entry`].
enum Counter<'a> {
    Ring(&'a mut BurstRing),
    Fixed(&'a mut Fixed, &'static WindowSpec),
}

impl Counter<'_> {
    fn used(&self, now_ms: u64) -> u32 {
        match self {
            Counter::Ring(r) => r.used(now_ms),
            Counter::Fixed(f, spec) => f.used_at(windows::index(now_ms, spec.span_ms)),
        }
    }

    fn add(&mut self, now_ms: u64, n: u32) {
        match self {
            Counter::Ring(r) => r.add(now_ms, n),
            Counter::Fixed(f, spec) => f.add(windows::index(now_ms, spec.span_ms), n),
        }
    }

    fn reset_ms(&self, now_ms: u64) -> u64 {
        match self {
            Counter::Ring(r) => r.reset_ms(now_ms),
            Counter::Fixed(_, spec) => windows::until_rollover(now_ms, spec.span_ms),
        }
    }
}

impl Entry {
    /// The counter of window `kind`: the one place an entry's fields meet the window table.
    fn counter(&mut self, kind: WindowKind) -> Counter<'_> {
        let spec = kind.spec();
        let counter = match kind {
            WindowKind::Burst => Counter::Ring(&mut self.burst),
            WindowKind::Hourly => Counter::Fixed(&mut self.hour, spec),
            WindowKind::Daily => Counter::Fixed(&mut self.day, spec),
            WindowKind::KeyHourly => Counter::Fixed(&mut self.key_hour, spec),
        };
        debug_assert_eq!(
            matches!(counter, Counter::Ring(_)),
            spec.shape == Shape::Sliding
        );
        counter
    }

    /// True when forgetting this entry changes no answer: nothing counted in any live window.
    pub fn is_stale(&self, now_ms: u64) -> bool {
        // Reads go through a copy (the entry is small and `Copy`), so one mapping serves both.
        let mut e = *self;
        WindowKind::ALL
            .into_iter()
            .all(|k| e.counter(k).used(now_ms) == 0)
    }
}

/// Checks and counts `req` against `e`.
pub fn apply(e: &mut Entry, req: &CountRequest) -> CountOutcome {
    let now = req.now_ms;
    e.last_seen_s = u32::try_from(now / 1000).unwrap_or(u32::MAX);

    let used = PerWindow::from_fn(|k| e.counter(k).used(now));
    let refused = req.limits.map(|k, limit| {
        limit.is_some_and(|l| l.refuse && k.spec().refuses(used[k], req.cost, l.max))
    });
    let admitted = !refused.0.contains(&true);
    let uses = req.limits.map(|k, limit| {
        let limit = (*limit)?;
        let spec = k.spec();
        let add = spec.counts.per_request(req.cost);
        let counted = admitted || spec.counts_refused;
        let mut c = e.counter(k);
        if counted {
            c.add(now, add);
        }
        Some(WindowUse {
            limit: limit.max,
            used: if counted {
                used[k].saturating_add(add)
            } else {
                used[k]
            },
            reset_ms: c.reset_ms(now),
        })
    });
    CountOutcome {
        admitted,
        refused,
        uses,
    }
}

/// Current use without counting (admin views).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub used: PerWindow<u32>,
    /// Milliseconds until each window frees capacity.
    pub reset_ms: PerWindow<u64>,
}

impl Usage {
    pub fn of(e: &Entry, now_ms: u64) -> Usage {
        let mut e = *e;
        Usage {
            used: PerWindow::from_fn(|k| e.counter(k).used(now_ms)),
            reset_ms: PerWindow::from_fn(|k| e.counter(k).reset_ms(now_ms)),
        }
    }

    /// An entry holding exactly these counts at `now_ms` (a dry run applies to it; the sliding
    /// window collapsed into the current slot, which is exact for "is there room now").
    pub fn entry(&self, now_ms: u64) -> Entry {
        let mut e = Entry::default();
        for (k, used) in self.used.iter() {
            e.counter(k).add(now_ms, *used);
        }
        e
    }
}
