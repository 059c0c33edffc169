//! `attempt(identity, now)`: the old throttle's call, kept exactly. No tier: the default
//! allowance is the anonymous burst (120 per 60 s) and no hourly budget. A burst violation is a
//! strike; when the identity is an IP address its lockout reaches the kernel like any other.

use std::net::IpAddr;

use super::base::Engine;
use super::decide::{base_decision, ceil_secs, locked, window};
use crate::identity::client_ip;
use crate::identity::hash::Namespace;
use crate::model::{Decision, PerWindow, Reason, Tier, WindowKind};
use crate::store::count::{CountRequest, Limit};
use crate::store::Gate;

impl Engine {
    /// Counts one attempt by `identity` at `now_ms` against the burst only.
    pub fn attempt(&self, identity: &str, now_ms: u64) -> Decision {
        let cfg = self.config();
        let id = self.hasher.id(Namespace::Compat, identity.as_bytes());
        let mut d = base_decision(&cfg, Tier::Anon, id.display());
        let ip: Option<IpAddr> = identity
            .parse()
            .ok()
            .map(|ip| client_ip::group(ip, cfg.identity.ipv6_prefix));
        let req = CountRequest::new(
            id,
            now_ms,
            1,
            PerWindow::default().with(
                WindowKind::Burst,
                Some(Limit::refusing(cfg.tiers.anon.burst.get())),
            ),
        );
        // An address's lockout is asked together with the count (one round trip on Valkey).
        let gate = match ip {
            Some(ip) => self.store.gate_and_count(ip, &req),
            None => self.store.check_and_count(&req).map(Gate::Counted),
        };
        let o = match gate {
            Ok(Gate::Locked(l)) => return locked(d, l.remaining_ms(now_ms)),
            Ok(Gate::Counted(o)) => o,
            Err(err) => {
                tracing::warn!(error = %err, "store check failed; allowing");
                return d;
            }
        };
        d.cost = 1;
        if let Some(w) = o.uses[WindowKind::Burst] {
            d.windows.push(window(WindowKind::Burst, &w));
            if o.refused[WindowKind::Burst] {
                d.reject(Reason::Burst, ceil_secs(w.reset_ms).max(1));
                if let Some(ip) = ip {
                    self.burst_strike(&cfg, &mut d, ip, now_ms, w.reset_ms);
                }
            }
        }
        d
    }
}
