//! Turning a request into a [`Decision`]: lists → lockout → caller and route → one atomic
//! check-and-count → reason, delay, reminder, strike.
//!
//! When several windows refuse, the reason is the refusing window of lowest rank in the window
//! table ([`crate::model::WINDOWS`]: `burst`, then `hourly`, `key_hourly`, `daily`). Spending a
//! budget is a pricing question (no strike); a burst is misbehaviour happening now and earns a
//! strike, whatever budget is spent besides. The burst window counts every request that
//! arrives, refused or not, so a loop hammering a spent budget is still struck and locked out,
//! while a caller politely sitting at its limit, at or below its burst rate, never is.

use super::request::RequestInfo;
use super::Engine;
use crate::config::{Config, OverQuota, Route};
use crate::identity::{Caller, Subject};
use crate::model::{
    Decision, DelayKind, IdentityText, PerWindow, Reason, Tier, WindowKind, WindowState,
};
use crate::store::count::{CountOutcome, CountRequest, Limit, WindowUse};
use crate::store::windows::HOUR_MS;
use crate::store::Gate;

pub(crate) fn ceil_secs(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

pub(crate) fn window(kind: WindowKind, w: &WindowUse) -> WindowState {
    WindowState {
        kind,
        limit: u64::from(w.limit),
        remaining: u64::from(w.remaining()),
        window_secs: kind.spec().span_ms / 1000,
        reset_secs: ceil_secs(w.reset_ms),
    }
}

/// The windows that applied, in [`WindowKind::ALL`] order.
fn windows_of(o: &CountOutcome) -> Vec<WindowState> {
    o.uses
        .iter()
        .filter_map(|(k, w)| w.as_ref().map(|w| window(k, w)))
        .collect()
}

/// What `caller` may spend in each window on `route` (`None`: the window does not apply).
fn limits(cfg: &Config, caller: &Caller, route: &Route) -> PerWindow<Option<Limit>> {
    let tier = cfg.tiers.get(caller.tier);
    PerWindow::from_fn(|kind| match kind {
        WindowKind::Burst => route
            .limits
            .applies(WindowKind::Burst)
            .then_some(Limit::refusing(tier.burst.get())),
        WindowKind::Hourly => route
            .limits
            .applies(WindowKind::Hourly)
            .then_some(Limit::refusing(tier.hourly.get())),
        WindowKind::Daily => match caller.subject {
            Subject::Token(_) => Some(cfg.quota.token),
            _ => cfg.quota.daily_for(caller.tier),
        }
        .filter(|_| route.limits.applies(WindowKind::Daily))
        .map(|l| Limit {
            max: l.get(),
            refuse: route.over_quota == OverQuota::Reject,
        }),
        WindowKind::KeyHourly => match &caller.subject {
            Subject::Key(k) if route.key_limit => Some(Limit::refusing(k.hourly_limit)),
            _ => None,
        },
    })
}

/// What a decision may do beyond answering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Counted: strike, lock and push verified tiers to the kernel.
    Enforce,
    /// Counted in shadow mode: a strike that would have been made is only noted.
    Shadow,
    /// Nothing counted, nothing struck (admin explain).
    DryRun,
}

/// The hourly budget of `limits`: the tighter of tier budget and key limit, as
/// [`Decision::hourly_limit`] reads them from the windows.
fn hourly_budget(limits: &PerWindow<Option<Limit>>) -> Option<u64> {
    [WindowKind::Hourly, WindowKind::KeyHourly]
        .into_iter()
        .filter_map(|k| limits[k].map(|l| u64::from(l.max)))
        .min()
}

/// A decision skeleton: allow, no windows.
pub(crate) fn base_decision(
    cfg: &Config,
    tier: Tier,
    identity: impl Into<IdentityText>,
) -> Decision {
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
        let route = cfg.routes.matching(req.method, req.path);
        let shadow = cfg.engine.shadow || route.shadow;
        let mut d = self.judge(rt, req, route, now, count, shadow);
        if shadow {
            // Made and counted like any other; only the enforcing is left out.
            d.shadow(false);
        }
        d
    }

    /// The decision for `req` on `route`. In `shadow` mode nothing is struck or pushed to the
    /// kernel; a strike that would have been made is recorded in the decision's shadow.
    fn judge(
        &self,
        rt: &super::Runtime,
        req: &RequestInfo<'_>,
        route: &Route,
        now: u64,
        count: bool,
        shadow: bool,
    ) -> Decision {
        let cfg = &*rt.cfg;
        let caller = rt
            .resolver
            .resolve(cfg, &self.key_cache, req.peer, req.headers, now);
        let id = caller.id_key(&self.hasher);
        let mut d = base_decision(cfg, caller.tier, id.text());
        d.key_status = caller.key_status;
        let creq = CountRequest {
            id,
            now_ms: now,
            cost: route.cost.get(),
            limits: limits(cfg, &caller, route),
        };
        // A lockout counts no window, yet its 429 names the budget like every other.
        let budget = hourly_budget(&creq.limits);
        let lock_out = |mut d: Decision, remaining_ms: u64| {
            d.hourly_budget = budget;
            locked(d, remaining_ms)
        };

        let lists = &rt.lists;
        if lists.allows(caller.ip) {
            return d;
        }
        if let Some(until) = lists.denies(caller.ip, now) {
            return lock_out(d, until.map_or(HOUR_MS, |u| u.saturating_sub(now)));
        }
        if !count {
            // A counted decision asks the store once for lockout and counts (`gate_and_count`).
            match self.store.lockout(caller.group) {
                Ok(Some(l)) if l.is_active(now) => return lock_out(d, l.remaining_ms(now)),
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %err, "lockout lookup failed"),
            }
        }

        d.cost = creq.cost;
        let outcome = if count {
            match self.store.gate_and_count(caller.group, &creq) {
                Ok(Gate::Locked(l)) => return lock_out(d, l.remaining_ms(now)),
                Ok(Gate::Counted(o)) => Ok(o),
                Err(err) => Err(err),
            }
        } else {
            self.store.usage(&creq.id, now).map(|u| {
                // Rebuild an entry with the same counts, then apply to it.
                let mut e = u.map(|u| u.entry(now)).unwrap_or_default();
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
        let mode = match (count, shadow) {
            (false, _) => Mode::DryRun,
            (true, false) => Mode::Enforce,
            (true, true) => Mode::Shadow,
        };
        self.finish(cfg, &caller, &mut d, &outcome, now, mode);
        d
    }

    fn finish(
        &self,
        cfg: &Config,
        caller: &Caller,
        d: &mut Decision,
        o: &CountOutcome,
        now: u64,
        mode: Mode,
    ) {
        d.windows = windows_of(o);
        if let Some(daily) = &o.uses[WindowKind::Daily] {
            let remaining = daily.remaining();
            if remaining <= cfg.quota.warn_threshold {
                d.warn_remaining = Some(u64::from(remaining));
            }
        }
        if let Some(first) = o.refusing().min_by_key(|k| k.spec().rank) {
            let reason = first.spec().reason;
            // The caller cannot succeed before every refusing window has room again.
            let worst = o
                .refusing()
                .filter_map(|k| o.uses[k].map(|w| w.reset_ms))
                .max()
                .unwrap_or(1000);
            d.reject(reason, ceil_secs(worst).max(1));
            if reason == Reason::Burst && mode == Mode::Enforce {
                let frees_ms = o.uses[WindowKind::Burst].map_or(0, |w| w.reset_ms);
                self.burst_strike(cfg, d, caller.group, now, frees_ms);
            } else if reason == Reason::Burst && mode == Mode::Shadow {
                d.shadow(true);
            }
            return;
        }
        if mode == Mode::Enforce && caller.is_verified() {
            let refresh = u64::try_from(cfg.kernel.tier_ttl.as_millis() / 2).unwrap_or(u64::MAX);
            self.tiers.push(
                &*self.sink,
                caller.group,
                caller.tier,
                now,
                refresh.max(1000),
            );
        }
        if let Some(daily) = &o.uses[WindowKind::Daily] {
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
    }
}
