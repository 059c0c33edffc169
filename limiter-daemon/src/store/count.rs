//! One atomic check-and-count: the single operation a store performs per decision. It checks
//! every window of one identity and, only if none refuses, counts the request in all of them.
//! A refused request consumes nothing (so "admitted" is what every window counts).
//!
//! [`apply`] is the reference semantics on one identity's [`Entry`]; the embedded store calls it
//! under a shard lock, and a Valkey backend implements the same steps in one script.

use super::windows::{self, BurstRing, Fixed, DAY_MS, HOUR_MS};
use crate::identity::hash::IdKey;

/// The daily quota rule for this request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DailyRule {
    pub limit: u32,
    /// `true` (reject mode): over the limit refuses. `false` (delay mode): always counts; the
    /// engine turns the count into a delay.
    pub enforce: bool,
}

/// What to check and count for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountRequest {
    pub id: IdKey,
    pub now_ms: u64,
    /// Units for the hourly, key-hourly and daily windows (burst counts requests).
    pub cost: u32,
    pub burst: Option<u32>,
    pub hourly: Option<u32>,
    pub key_hourly: Option<u32>,
    pub daily: Option<DailyRule>,
}

/// One window after the operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowUse {
    pub limit: u32,
    /// Count after this request (admitted) or before it (refused).
    pub used: u32,
    /// Milliseconds until the window frees capacity (fixed windows: until rollover).
    pub reset_ms: u64,
}

impl WindowUse {
    pub fn remaining(&self) -> u32 {
        self.limit.saturating_sub(self.used)
    }
}

/// Which windows refused (several may).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    pub burst: bool,
    pub hourly: bool,
    pub key_hourly: bool,
    pub daily: bool,
}

impl Refusals {
    pub fn any(&self) -> bool {
        self.burst || self.hourly || self.key_hourly || self.daily
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountOutcome {
    pub admitted: bool,
    pub refused: Refusals,
    pub burst: Option<WindowUse>,
    pub hourly: Option<WindowUse>,
    pub key_hourly: Option<WindowUse>,
    pub daily: Option<WindowUse>,
}

/// Every window of one identity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    pub burst: BurstRing,
    pub hour: Fixed,
    pub day: Fixed,
    pub key_hour: Fixed,
    /// Seconds since the epoch of the last operation (for eviction order).
    pub last_seen_s: u32,
}

impl Entry {
    /// True when forgetting this entry changes no answer: nothing counted in any live window.
    pub fn is_stale(&self, now_ms: u64) -> bool {
        let h = windows::hour_index(now_ms);
        let d = windows::day_index(now_ms);
        self.burst.is_stale(now_ms)
            && self.hour.is_stale(h)
            && self.key_hour.is_stale(h)
            && self.day.is_stale(d)
    }
}

/// Checks and counts `req` against `e`.
pub fn apply(e: &mut Entry, req: &CountRequest) -> CountOutcome {
    let now = req.now_ms;
    let h = windows::hour_index(now);
    let d = windows::day_index(now);
    let to_hour = windows::until_rollover(now, HOUR_MS);
    let to_day = windows::until_rollover(now, DAY_MS);
    e.last_seen_s = u32::try_from(now / 1000).unwrap_or(u32::MAX);

    let mut refused = Refusals::default();
    let burst_used = req.burst.map(|l| (l, e.burst.used(now)));
    if let Some((limit, used)) = burst_used {
        refused.burst = used >= limit;
    }
    let fixed = |limit: Option<u32>, used: u32| limit.map(|l| (l, used));
    let hourly = fixed(req.hourly, e.hour.used_at(h));
    let key_hourly = fixed(req.key_hourly, e.key_hour.used_at(h));
    let daily = req.daily.map(|r| (r, e.day.used_at(d)));
    let over = |(l, used): (u32, u32)| used.saturating_add(req.cost) > l;
    refused.hourly = hourly.is_some_and(over);
    refused.key_hourly = key_hourly.is_some_and(over);
    refused.daily = daily.is_some_and(|(r, used)| r.enforce && over((r.limit, used)));

    let admitted = !refused.any();
    if admitted {
        if req.burst.is_some() {
            e.burst.admit(now);
        }
        if req.hourly.is_some() {
            e.hour.add(h, req.cost);
        }
        if req.key_hourly.is_some() {
            e.key_hour.add(h, req.cost);
        }
        if req.daily.is_some() {
            e.day.add(d, req.cost);
        }
    }
    let after = |before: u32, add: u32| {
        if admitted {
            before.saturating_add(add)
        } else {
            before
        }
    };
    CountOutcome {
        admitted,
        refused,
        burst: burst_used.map(|(limit, used)| WindowUse {
            limit,
            used: after(used, 1),
            reset_ms: e.burst.reset_ms(now),
        }),
        hourly: hourly.map(|(limit, used)| WindowUse {
            limit,
            used: after(used, req.cost),
            reset_ms: to_hour,
        }),
        key_hourly: key_hourly.map(|(limit, used)| WindowUse {
            limit,
            used: after(used, req.cost),
            reset_ms: to_hour,
        }),
        daily: daily.map(|(r, used)| WindowUse {
            limit: r.limit,
            used: after(used, req.cost),
            reset_ms: to_day,
        }),
    }
}

/// Current use without counting (admin views).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub burst: u32,
    pub burst_reset_ms: u64,
    pub hourly: u32,
    pub key_hourly: u32,
    pub daily: u32,
}

impl Usage {
    pub fn of(e: &Entry, now_ms: u64) -> Usage {
        let h = windows::hour_index(now_ms);
        Usage {
            burst: e.burst.used(now_ms),
            burst_reset_ms: e.burst.reset_ms(now_ms),
            hourly: e.hour.used_at(h),
            key_hourly: e.key_hour.used_at(h),
            daily: e.day.used_at(windows::day_index(now_ms)),
        }
    }
}
