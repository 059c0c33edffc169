//! Turning a request into a [`Decision`]: lists → lockout → caller and route → one atomic
//! check-and-count → reason, delay, reminder, strike.
//!
//! Order of reasons when several windows refuse: `hourly`, `key_hourly`, `daily`, then
//! `burst`. Spending a budget is a pricing question (no strike); only a burst violation on an
//! otherwise admissible request is misbehaviour and earns a strike, so a caller politely
//! sitting at an exhausted budget is never escalated into a lockout.

use super::request::RequestInfo;
use super::Engine;
use crate::config::{Config, OverQuota};
use crate::identity::{Caller, Subject};
use crate::model::{Decision, DelayKind, Reason, Tier, WindowKind, WindowState};
use crate::store::count::{CountOutcome, CountRequest, DailyRule, WindowUse};
use crate::store::windows::{BURST_SPAN_MS, DAY_MS, HOUR_MS};
use crate::store::Gate;

pub(crate) fn ceil_secs(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

pub(crate) fn window(kind: WindowKind, w: &WindowUse, len_ms: u64) -> WindowState {
    WindowState {
        kind,
        limit: u64::from(w.limit),
        remaining: u64::from(w.remaining()),
        window_secs: len_ms / 1000,
        reset_secs: ceil_secs(w.reset_ms),
    }
}

fn windows_of(o: &CountOutcome) -> Vec<WindowState> {
    let mut v = Vec::with_capacity(4);
    if let Some(w) = &o.burst {
        v.push(window(WindowKind::Burst, w, BURST_SPAN_MS));
    }
    if let Some(w) = &o.hourly {
        v.push(window(WindowKind::Hourly, w, HOUR_MS));
    }
    if let Some(w) = &o.daily {
        v.push(window(WindowKind::Daily, w, DAY_MS));
    }
    if let Some(w) = &o.key_hourly {
        v.push(window(WindowKind::KeyHourly, w, HOUR_MS));
    }
    v
}

/// A decision skeleton: allow, no windows.
pub(crate) fn base_decision(cfg: &Config, tier: Tier, identity: String) -> Decision {
    Decision::new(tier, identity, cfg.upgrade.hint(tier))
}

pub(crate) fn locked(mut d: Decision, remaining_ms: u64) -> Decision {
    d.reject(Reason::Locked, ceil_secs(remaining_ms).max(1));
    d
}

impl Engine {
    /// Decides on `req` now (the injected clock) and counts it.
    pub fn decide(&self, req: &RequestInfo<'_>) -> Decision {
        self.decide_at(req, self.clock.now_ms(), true)
    }

    /// What `decide` would answer, without counting anything or striking (admin dry-run).
    pub fn explain(&self, req: &RequestInfo<'_>) -> Decision {
        self.decide_at(req, self.clock.now_ms(), false)
    }

    fn decide_at(&self, req: &RequestInfo<'_>, now: u64, count: bool) -> Decision {
        self.with_runtime(|rt| self.decide_with(rt, req, now, count))
    }

    fn decide_with(
        &self,
        rt: &super::Runtime,
        req: &RequestInfo<'_>,
        now: u64,
        count: bool,
    ) -> Decision {
        let cfg = &*rt.cfg;
        let caller = rt
            .resolver
            .resolve(cfg, &self.key_cache, req.peer, req.headers, now);
        let id = caller.id_key(&self.hasher);
        let mut d = base_decision(cfg, caller.tier, id.display());
        d.key_status = caller.key_status;

        let lists = &rt.lists;
        if lists.allows(caller.ip) {
            return d;
        }
        if let Some(until) = lists.denies(caller.ip, now) {
            return locked(d, until.map_or(HOUR_MS, |u| u.saturating_sub(now)));
        }
        if !count {
            // A counted decision asks the store once for lockout and counts (`gate_and_count`).
            match self.store.lockout(caller.group) {
                Ok(Some(l)) if l.is_active(now) => return locked(d, l.remaining_ms(now)),
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %err, "lockout lookup failed"),
            }
        }

        let route = cfg.routes.matching(req.method, req.path);
        let limits = cfg.tiers.get(caller.tier);
        let daily_limit = match caller.subject {
            Subject::Token(_) => Some(cfg.quota.token),
            _ => cfg.quota.daily_for(caller.tier),
        };
        let key_hourly = match &caller.subject {
            Subject::Key(k) if route.key_limit => Some(k.hourly_limit),
            _ => None,
        };
        let creq = CountRequest {
            id,
            now_ms: now,
            cost: route.cost.get(),
            burst: route.limits.burst.then_some(limits.burst.get()),
            hourly: route.limits.hourly.then_some(limits.hourly.get()),
            key_hourly,
            daily: daily_limit
                .filter(|_| route.limits.daily)
                .map(|l| DailyRule {
                    limit: l.get(),
                    enforce: route.over_quota == OverQuota::Reject,
                }),
        };
        d.cost = creq.cost;
        let outcome = if count {
            match self.store.gate_and_count(caller.group, &creq) {
                Ok(Gate::Locked(l)) => return locked(d, l.remaining_ms(now)),
                Ok(Gate::Counted(o)) => Ok(o),
                Err(err) => Err(err),
            }
        } else {
            self.store.usage(&creq.id, now).map(|u| {
                let mut e = crate::store::count::Entry::default();
                if let Some(u) = u {
                    // Rebuild an entry with the same counts, then apply to a copy.
                    e = usage_entry(&u, now);
                }
                crate::store::count::apply(&mut e, &creq)
            })
        };
        let outcome = match outcome {
            Ok(o) => o,
            Err(err) => {
                // Never a 5xx because the store failed: let the request through, say so.
                tracing::warn!(error = %err, "store check failed; allowing");
                return d;
            }
        };
        self.finish(cfg, &caller, d, &outcome, now, count)
    }

    fn finish(
        &self,
        cfg: &Config,
        caller: &Caller,
        mut d: Decision,
        o: &CountOutcome,
        now: u64,
        count: bool,
    ) -> Decision {
        d.windows = windows_of(o);
        if let Some(daily) = &o.daily {
            let remaining = daily.remaining();
            if remaining <= cfg.quota.warn_threshold {
                d.warn_remaining = Some(u64::from(remaining));
            }
        }
        let r = &o.refused;
        if r.any() {
            let (reason, w) = if r.hourly {
                (Reason::Hourly, o.hourly)
            } else if r.key_hourly {
                (Reason::KeyHourly, o.key_hourly)
            } else if r.daily {
                (Reason::Daily, o.daily)
            } else {
                (Reason::Burst, o.burst)
            };
            // The caller cannot succeed before every refusing window has room again.
            let worst = [
                (r.hourly, o.hourly),
                (r.key_hourly, o.key_hourly),
                (r.daily, o.daily),
                (r.burst, o.burst),
            ]
            .iter()
            .filter_map(|(on, w)| on.then_some(*w).flatten().map(|w| w.reset_ms))
            .max()
            .or(w.map(|w| w.reset_ms))
            .unwrap_or(1000);
            d.reject(reason, ceil_secs(worst).max(1));
            if reason == Reason::Burst && count {
                let frees_ms = o.burst.map_or(0, |w| w.reset_ms);
                self.burst_strike(cfg, &mut d, caller.group, now, frees_ms);
            }
            return d;
        }
        if count && caller.is_verified() {
            let refresh = u64::try_from(cfg.kernel.tier_ttl.as_millis() / 2).unwrap_or(u64::MAX);
            self.tiers.push(
                &*self.sink,
                caller.group,
                caller.tier,
                now,
                refresh.max(1000),
            );
        }
        if let Some(daily) = &o.daily {
            let l = daily.limit;
            let n = daily.used;
            if n > l {
                let soft = n - l <= cfg.quota.soft_window;
                if soft {
                    d.hold(cfg.quota.soft_delay, DelayKind::Soft);
                } else {
                    d.hold(cfg.quota.hard_delay, DelayKind::Hard);
                }
            }
        }
        d
    }
}

/// An entry holding exactly `u`'s counts at `now` (explain only; burst collapsed into the
/// current slot, which is exact for "is there room now").
fn usage_entry(u: &crate::store::count::Usage, now: u64) -> crate::store::count::Entry {
    use crate::store::windows::{day_index, hour_index, Fixed};
    let mut e = crate::store::count::Entry::default();
    for _ in 0..u.burst.min(u32::from(u16::MAX)) {
        e.burst.admit(now);
    }
    e.hour = Fixed {
        index: hour_index(now),
        used: u.hourly,
    };
    e.key_hour = Fixed {
        index: hour_index(now),
        used: u.key_hourly,
    };
    e.day = Fixed {
        index: day_index(now),
        used: u.daily,
    };
    e
}
