//! Turning a request into a [`Decision`]: lists → lockout → caller and route → one atomic
//! check-and-count → reason, delay, reminder, strike.
//!
//! When several windows refuse, the reason is the refusing window of lowest rank in the window
//! table ([`crate::model::WINDOWS`]: `burst`, then `hourly`, `key_hourly`, `daily`). Spending a
//! budget is a pricing question (no strike); a burst is misbehaviour happening now and earns a
//! strike, whatever budget is spent besides. The burst window counts every request that
//! arrives, refused or not, so a loop hammering a spent budget is still struck and locked out,
//! while a caller politely sitting at its limit, at or below its burst rate, never is.
//!
//! A caller metered by address also counts against its networks ([`super::networks`]), in the
//! same atomic count. The reasons rank: the caller's own burst (a strike on the address), then
//! a network's burst (a strike on the network, locking the addresses that sent in its burst
//! window, or its prefix), then the caller's spent
//! budgets, then a network's spent hourly budget. A request refused anywhere spends no budget
//! anywhere.

use std::num::NonZeroU32;
use std::sync::Arc;

use super::base::{Engine, Runtime};
use super::decided::Decided;
use super::networks::CallerNetworks;
use super::request::RequestView;
use crate::config::{Config, OverQuota, Route};
use crate::identity::{Caller, Subject};
use crate::model::{
    Decision, DelayKind, IdentityText, LockCause, NetLevel, NetworkState, PerWindow, Reason, Tier,
    WindowKind, WindowState,
};
use crate::store::count::{CountOutcome, CountRequest, Limit, NetUse, WindowUse};
use crate::store::windows::HOUR_MS;
use crate::store::{Counting, Gate, StoreError};

pub(crate) use crate::clock::ceil_secs;

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
/// A verified agent with its own `[[agents.budgets]]` entry spends that instead of its
/// rung's.
fn limits(cfg: &Config, caller: &Caller, route: &Route) -> PerWindow<Option<Limit>> {
    let tier = cfg.tiers.get(caller.tier);
    let own = match &caller.subject {
        Subject::Agent(dir) if !cfg.agents.budgets.is_empty() => {
            cfg.agents.budgets.get(&**dir).copied().unwrap_or_default()
        }
        _ => Default::default(),
    };
    PerWindow::from_fn(|kind| match kind {
        WindowKind::Burst => route
            .limits
            .applies(WindowKind::Burst)
            .then_some(Limit::refusing(own.burst.unwrap_or(tier.burst).get())),
        WindowKind::Hourly => route
            .limits
            .applies(WindowKind::Hourly)
            .then_some(Limit::refusing(own.hourly.unwrap_or(tier.hourly).get())),
        WindowKind::Daily => match caller.subject {
            Subject::Token(_) => Some(cfg.quota.token),
            Subject::Agent(_) => own.daily.or(tier.daily),
            _ => tier.daily,
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

/// The first network level that refused, the window that refused there (the burst before the
/// hourly budget), and its windows.
fn network_refusal(o: &CountOutcome) -> Option<(NetLevel, WindowKind, NetUse)> {
    NetLevel::ALL.into_iter().find_map(|level| {
        let nu = o.networks[level.index()]?;
        let kind = [WindowKind::Burst, WindowKind::Hourly]
            .into_iter()
            .find(|k| nu.refused[*k])?;
        Some((level, kind, nu))
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

/// The hourly budget a 429 names: the tighter of tier budget and key limit where they apply
/// (as [`Decision::hourly_limit`] reads them from the windows), else the caller's own hourly
/// budget on its rung, so a 429 on a route without an hourly window (or a lockout, which counts
/// no window) still names it.
fn hourly_budget(cfg: &Config, caller: &Caller, limits: &PerWindow<Option<Limit>>) -> u64 {
    [WindowKind::Hourly, WindowKind::KeyHourly]
        .into_iter()
        .filter_map(|k| limits[k].map(|l| u64::from(l.max)))
        .min()
        .unwrap_or_else(|| {
            let own = match &caller.subject {
                Subject::Agent(dir) => cfg.agents.budgets.get(&**dir).and_then(|b| b.hourly),
                _ => None,
            };
            u64::from(own.unwrap_or(cfg.tiers.get(caller.tier).hourly).get())
        })
}

/// A decision skeleton: allow, no windows.
pub(crate) fn base_decision(
    cfg: &Config,
    tier: Tier,
    identity: impl Into<IdentityText>,
) -> Decision {
    Decision::new(tier, identity, cfg.upgrade.hint(tier))
}

/// In shadow mode a decision is made and counted like any other; only the enforcing is left
/// out.
fn with_shadow(mut d: Decision, shadow: bool) -> Decision {
    if shadow {
        d.shadow(false);
    }
    d
}

pub(crate) fn locked(mut d: Decision, remaining_ms: u64) -> Decision {
    d.reject(Reason::Locked, ceil_secs(remaining_ms).max(1));
    d
}

/// A counted decision waiting on its store work: what finishing it needs, owned, so the
/// remote store's future can carry it across the await.
pub(crate) struct Counted {
    d: Decision,
    caller: Caller,
    nets: CallerNetworks,
    creq: CountRequest,
    mode: Mode,
    shadow: bool,
}

/// The first half of a decision.
// `Count` is the common case and is matched at once by the caller: boxing it would cost an
// allocation per decision to save a move.
#[allow(clippy::large_enum_variant)]
enum Step {
    /// Decided without counting (lists, explain, a store failure while reading).
    Done(Decision),
    /// To be finished with the store's answer for `creq` (kept unboxed: it is matched at once).
    Count(Counted),
}

impl Engine {
    /// Decides on `req` now (the injected clock) and counts it. Blocks on a remote store's
    /// round trip: the request path uses [`Engine::decide_async`].
    pub fn decide(&self, req: &RequestView<'_>) -> Decision {
        let now = self.clock.now_ms();
        self.with_runtime(|rt| match self.begin(rt, req, now, true, None) {
            Step::Done(d) => d,
            Step::Count(c) => {
                let gate = self.store.gate_and_count(c.caller.group, &c.creq);
                self.end(&rt.cfg, c, gate)
            }
        })
    }

    /// [`Engine::decide`] without blocking: answered in place when the store answers in place
    /// (the embedded store, a remote store's local caches), else a future awaiting the
    /// remote call. Both finish the decision with the same code. Answered in place, the
    /// decision stays on the stack and borrows this thread's runtime: no allocation and no
    /// shared reference count per request.
    pub fn decide_async(&self, req: &RequestView<'_>) -> Decided<'_> {
        self.decide_async_costing(req, None)
    }

    /// [`Engine::decide_async`] at `cost` units instead of the route's (`None`: the route's),
    /// for a front end that states what a request costs (Envoy's `hits_addend`).
    pub fn decide_async_costing(
        &self,
        req: &RequestView<'_>,
        cost: Option<NonZeroU32>,
    ) -> Decided<'_> {
        let now = self.clock.now_ms();
        self.with_runtime(|rt| {
            let c = match self.begin(rt, req, now, true, cost) {
                Step::Done(d) => return Decided::Ready(d),
                Step::Count(c) => c,
            };
            match self.store.gate_and_count_async(c.caller.group, &c.creq) {
                Counting::Ready(gate) => Decided::Ready(self.end(&rt.cfg, c, gate)),
                Counting::Pending(call) => {
                    let cfg = Arc::clone(&rt.cfg);
                    Decided::Pending(Box::pin(async move {
                        let gate = call.await;
                        self.end(&cfg, c, gate)
                    }))
                }
            }
        })
    }

    /// What `decide` would answer, without counting anything or striking (admin dry-run).
    pub fn explain(&self, req: &RequestView<'_>) -> Decision {
        let now = self.clock.now_ms();
        match self.with_runtime(|rt| self.begin(rt, req, now, false, None)) {
            Step::Done(d) => d,
            // A dry run reads the usage in `begin`; it never asks to count.
            Step::Count(c) => c.d,
        }
    }

    /// Everything before the store counts: caller, route, lists; for a dry run, the whole
    /// decision from the current usage. `cost`, when given, replaces the route's.
    fn begin(
        &self,
        rt: &Runtime,
        req: &RequestView<'_>,
        now: u64,
        count: bool,
        cost: Option<NonZeroU32>,
    ) -> Step {
        let cfg = &*rt.cfg;
        let route = cfg.routes.matching(req.method.as_str(), req.path);
        let cost = cost.unwrap_or(route.cost);
        let shadow = cfg.engine.shadow || route.shadow;
        let caller = rt.resolver.resolve(
            cfg,
            &self.key_cache,
            &self.agent_dirs,
            req.client,
            req.method.as_str(),
            req.path,
            req.headers,
            now,
            count,
        );
        let id = caller.id_key(&self.hasher);
        let mut d = base_decision(cfg, caller.tier, id.text());
        d.key_status = caller.key_status;
        let (nets, net_counts) = CallerNetworks::of(cfg, &caller, &self.hasher);
        d.crawler = caller.crawler;
        d.agent = caller.agent;
        d.claim.clone_from(&caller.claim);
        let creq = CountRequest {
            networks: net_counts,
            ..CountRequest::new(id, now, cost.get(), limits(cfg, &caller, route))
        };
        // Every 429 names the hourly budget, whatever refused it: a lockout counts no window,
        // and a route may count no hourly one.
        d.hourly_budget = Some(hourly_budget(cfg, &caller, &creq.limits));
        let lock_out =
            |d: Decision, remaining_ms: u64| with_shadow(locked(d, remaining_ms), shadow);

        let lists = &rt.lists;
        if lists.allows(caller.ip) {
            return Step::Done(with_shadow(d, shadow));
        }
        if let Some(entry) = lists.deny_entry(caller.ip, now) {
            let network = entry
                .comment
                .starts_with(super::networks::NETWORK_LOCKOUT_MARK);
            d.lock_cause = Some(if network {
                LockCause::Network
            } else {
                LockCause::Manual
            });
            return Step::Done(lock_out(
                d,
                entry.until_ms.map_or(HOUR_MS, |u| u.saturating_sub(now)),
            ));
        }
        if count {
            d.cost = creq.cost;
            let mode = if shadow { Mode::Shadow } else { Mode::Enforce };
            return Step::Count(Counted {
                d,
                caller,
                nets,
                creq,
                mode,
                shadow,
            });
        }
        // A counted decision asks the store once for lockout and counts (`gate_and_count`).
        match self.store.lockout(caller.group) {
            Ok(Some(l)) if l.is_active(now) => {
                d.lock_cause = Some(l.cause);
                return Step::Done(lock_out(d, l.remaining_ms(now)));
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(error = %err, "lockout lookup failed"),
        }
        d.cost = creq.cost;
        let entry = |id| {
            // Rebuild an entry with the same counts, then apply to it.
            self.store
                .usage(id, now)
                .map(|u| u.map(|u| u.entry(now)).unwrap_or_default())
        };
        let outcome = (|| {
            let mut e = entry(&creq.id)?;
            let mut ne = [Default::default(); crate::store::count::NET_LEVELS];
            for (i, n) in creq.networks.iter().enumerate() {
                if let Some(n) = n {
                    ne[i] = entry(&n.id)?;
                }
            }
            let [n0, n1] = &mut ne;
            let present = |i: usize| creq.networks[i].is_some();
            Ok::<_, StoreError>(crate::store::count::apply_all(
                &mut e,
                [present(0).then_some(n0), present(1).then_some(n1)],
                &creq,
            ))
        })();
        match outcome {
            Ok(o) => self.finish(cfg, &caller, &nets, &mut d, &o, now, Mode::DryRun),
            Err(err) => tracing::warn!(error = %err, "store read failed; allowing"),
        }
        Step::Done(with_shadow(d, shadow))
    }

    /// The rest of a counted decision, from the store's answer.
    fn end(&self, cfg: &Config, c: Counted, gate: Result<Gate, StoreError>) -> Decision {
        let Counted {
            mut d,
            caller,
            nets,
            creq,
            mode,
            shadow,
        } = c;
        let now = creq.now_ms;
        match gate {
            Ok(Gate::Locked(l)) => {
                d.lock_cause = Some(l.cause);
                d = locked(d, l.remaining_ms(now));
            }
            Ok(Gate::Counted(o)) => self.finish(cfg, &caller, &nets, &mut d, &o, now, mode),
            Err(StoreError::Closed { retry_after_secs }) => {
                d.reject(Reason::Unavailable, retry_after_secs.max(1));
            }
            // `on_failure = "open"`: admitted uncounted, as configured; nothing to warn about.
            Err(StoreError::Open) => {}
            // Never a 5xx because the store failed: let the request through, say so.
            Err(err) => tracing::warn!(error = %err, "store check failed; allowing"),
        }
        let d = with_shadow(d, shadow);
        self.crawler_lookup(&caller, &d, now);
        self.agent_fetch(&caller, &d, now);
        d
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        cfg: &Config,
        caller: &Caller,
        nets: &CallerNetworks,
        d: &mut Decision,
        o: &CountOutcome,
        now: u64,
        mode: Mode,
    ) {
        d.windows = windows_of(o);
        if mode != Mode::DryRun {
            self.note_senders(nets, caller.group, now);
        }
        if let Some(daily) = &o.uses[WindowKind::Daily] {
            let remaining = daily.remaining();
            if remaining <= cfg.quota.warn_threshold {
                d.warn_remaining = Some(u64::from(remaining));
            }
        }
        let own = o.refusing().min_by_key(|k| k.spec().rank);
        let network = network_refusal(o);
        let network_first = match (own, network) {
            (Some(WindowKind::Burst), _) => false,
            (_, Some((_, WindowKind::Burst, _))) => true,
            (Some(_), _) => false,
            (None, n) => n.is_some(),
        };
        if let (true, Some((level, kind, nu))) = (network_first, network) {
            // The caller cannot succeed before every refusing window has room again.
            let worst = o
                .refusing()
                .filter_map(|k| o.uses[k].map(|w| w.reset_ms))
                .chain(
                    nu.refused
                        .iter()
                        .filter(|(_, r)| **r)
                        .filter_map(|(k, _)| nu.uses[k].map(|w| w.reset_ms)),
                )
                .max()
                .unwrap_or(1000);
            d.reject(Reason::Network, ceil_secs(worst).max(1));
            if let (Some(name), Some(w)) = (nets.names[level.index()], nu.uses[kind]) {
                d.network = Some(Box::new(NetworkState {
                    name,
                    window: window(kind, &w),
                    locked: Vec::new(),
                }));
            }
            if kind == WindowKind::Burst && mode == Mode::Enforce {
                let frees_ms = nu.uses[WindowKind::Burst].map_or(0, |w| w.reset_ms);
                self.network_strike(cfg, d, caller.group, nets, level, now, frees_ms);
            } else if kind == WindowKind::Burst && mode == Mode::Shadow {
                d.shadow(true);
            }
            return;
        }
        if let Some(first) = own {
            let reason = first.spec().reason;
            // The caller cannot succeed before every refusing window has room again.
            let worst = o
                .refusing()
                .filter_map(|k| o.uses[k].map(|w| w.reset_ms))
                .max()
                .unwrap_or(1000);
            d.reject(reason, ceil_secs(worst).max(1));
            // Unattributed callers are refused like anyone, but their address is the proxy's.
            if reason == Reason::Burst && mode == Mode::Enforce && caller.may_be_struck() {
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
