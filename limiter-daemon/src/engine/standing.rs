//! A caller's standing without counting anything: what the self-service endpoint
//! (`GET /.well-known/rate-limits` on the proxy) tells a caller about itself, and who the
//! caller is (what the overload ladder sheds by).
//!
//! The windows that apply and their limits come from [`Engine::explain`] (the one place those
//! rules live); the counts come from the store as they are now, before any further request.
//! So `remaining` is what the caller may still send: the rate-limit fields of its last
//! decision said the same, and those of its next one say `remaining − cost`.

use super::base::Engine;
use super::request::RequestView;
use crate::clock::ceil_secs;
use crate::model::{Action, Decision, Reason, WindowState};
use crate::store::count::{Entry, Usage};

/// One caller's standing.
#[derive(Clone, Debug, PartialEq)]
pub struct Standing {
    /// The decision its next request here would get (counted nothing): tier, upgrade sentence,
    /// verdict, and the windows as they would be after it.
    pub next: Decision,
    /// Each window that applies, as it is now.
    pub windows: Vec<WindowState>,
    /// Seconds of lockout left (`None`: not locked out).
    pub locked_secs: Option<u64>,
}

impl Engine {
    /// `req`'s caller as its next decision would name it (tier, identity, upgrade sentence,
    /// hourly budget), with no verdict; reads no store, counts nothing.
    pub fn caller(&self, req: &RequestView<'_>) -> Decision {
        let now = self.clock.now_ms();
        self.with_runtime(|rt| {
            let caller = rt.resolver.resolve(
                &rt.cfg,
                &self.key_cache,
                &self.agent_dirs,
                req.client,
                req.method.as_str(),
                req.path,
                req.headers,
                now,
                false,
            );
            let mut d = super::decide::base_decision(
                &rt.cfg,
                caller.tier,
                caller.id_key(&self.hasher).text(),
            );
            d.hourly_budget = Some(u64::from(rt.cfg.tiers.get(caller.tier).hourly.get()));
            d
        })
    }

    /// `req`'s caller's standing now; counts nothing, strikes nothing.
    pub fn standing(&self, req: &RequestView<'_>) -> Standing {
        let next = self.explain(req);
        let now = self.clock.now_ms();
        let usage = self.with_runtime(|rt| {
            let caller = rt.resolver.resolve(
                &rt.cfg,
                &self.key_cache,
                &self.agent_dirs,
                req.client,
                req.method.as_str(),
                req.path,
                req.headers,
                now,
                false,
            );
            self.store.usage(&caller.id_key(&self.hasher), now)
        });
        let usage = match usage {
            Ok(u) => u.unwrap_or_else(|| Usage::of(&Entry::default(), now)),
            Err(err) => {
                tracing::warn!(error = %err, "store usage lookup failed; standing without counts");
                Usage::of(&Entry::default(), now)
            }
        };
        let windows = next
            .windows
            .iter()
            .map(|w| WindowState {
                remaining: w.limit.saturating_sub(u64::from(usage.used[w.kind])),
                reset_secs: ceil_secs(usage.reset_ms[w.kind]),
                ..*w
            })
            .collect();
        let locked_secs = (next.action() == Action::Reject
            && next.reason() == Some(Reason::Locked))
        .then(|| next.retry_after_secs().unwrap_or(1));
        Standing {
            next,
            windows,
            locked_secs,
        }
    }
}
