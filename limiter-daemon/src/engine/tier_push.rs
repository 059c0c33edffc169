//! Pushes verified tiers into the kernel's tier map through the sink, at most once per
//! refresh interval per address, so the request path does not call into the kernel on every
//! request.

use std::collections::HashMap;
use std::net::IpAddr;

use parking_lot::Mutex;

use super::decision::Tier;
use super::sink::EnforcementSink;

/// Upper bound on remembered pushes; past it the memory is cleared (pushes simply repeat).
const MAX_REMEMBERED: usize = 100_000;

#[derive(Default)]
pub struct TierPusher {
    pushed: Mutex<HashMap<IpAddr, (Tier, u64)>>,
}

impl TierPusher {
    pub fn push(
        &self,
        sink: &dyn EnforcementSink,
        ip: IpAddr,
        tier: Tier,
        now_ms: u64,
        refresh_ms: u64,
    ) {
        {
            let mut m = self.pushed.lock();
            if let Some((t, at)) = m.get(&ip) {
                if *t == tier && now_ms.saturating_sub(*at) < refresh_ms {
                    return;
                }
            }
            if m.len() >= MAX_REMEMBERED {
                m.clear();
            }
            m.insert(ip, (tier, now_ms));
        }
        sink.set_tier(ip, tier);
    }
}
