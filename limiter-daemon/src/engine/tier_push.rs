//! Pushes verified tiers into the kernel's tier map through the sink, at most once per
//! refresh interval per address, so the request path does not call into the kernel on every
//! request. Sharded so verified callers on different cores rarely share a lock.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;

use parking_lot::Mutex;

use super::sink::EnforcementSink;
use crate::model::Tier;

const SHARDS: usize = 16;
/// Upper bound on remembered pushes per shard; past it the shard is cleared (pushes repeat).
const MAX_PER_SHARD: usize = 8_192;

pub struct TierPusher {
    shards: [Mutex<HashMap<IpAddr, (Tier, u64)>>; SHARDS],
    hasher: RandomState,
}

impl Default for TierPusher {
    fn default() -> Self {
        TierPusher {
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
            hasher: RandomState::new(),
        }
    }
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
        let shard = &self.shards[self.hasher.hash_one(ip) as usize % SHARDS];
        {
            let mut m = shard.lock();
            if let Some((t, at)) = m.get(&ip) {
                if *t == tier && now_ms.saturating_sub(*at) < refresh_ms {
                    return;
                }
            }
            if m.len() >= MAX_PER_SHARD {
                m.clear();
            }
            m.insert(ip, (tier, now_ms));
        }
        sink.set_tier(ip, tier);
    }
}
