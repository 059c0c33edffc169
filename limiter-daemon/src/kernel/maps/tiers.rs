//! The tier map (`LIM_TIER`): the verified tier of an address, with an expiry, which picks the
//! ceiling the program applies to it. The daemon writes it after identifying a client.

use std::net::IpAddr;
use std::time::Duration;

use limiter_common::maps::MAP_TIER;
use limiter_common::TierEntry;

use super::handle::KernelMaps;
use crate::kernel::addr::ip_key;
use crate::kernel::clock;
use crate::kernel::error::is_not_found;
use crate::kernel::KernelError;

impl KernelMaps {
    /// Records a verified tier (`limiter_common::config::TIER_*`) for `ip` until `ttl` from now.
    pub fn set_tier(&self, ip: IpAddr, tier: u32, ttl: Duration) -> Result<(), KernelError> {
        let key = ip_key(ip, self.v6_prefix()?);
        let value = TierEntry {
            expires_ns: clock::deadline_after(ttl)?,
            tier,
            _reserved: 0,
        };
        // LRU map: a full map evicts the least recently used tier, which is the right loss.
        self.tier
            .write()
            .insert(key, value, 0)
            .map_err(|e| KernelError::map_op("writing", MAP_TIER, e))
    }

    /// Forgets `ip`'s tier (it falls back to the anonymous ceiling).
    pub fn clear_tier(&self, ip: IpAddr) -> Result<bool, KernelError> {
        let key = ip_key(ip, self.v6_prefix()?);
        match self.tier.write().remove(&key) {
            Ok(()) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(KernelError::map_op("removing from", MAP_TIER, e)),
        }
    }

    /// The tier the kernel holds for `ip` and whether it is still valid.
    pub fn tier(&self, ip: IpAddr) -> Result<Option<(u32, bool)>, KernelError> {
        let key = ip_key(ip, self.v6_prefix()?);
        match self.tier.read().get(&key, 0) {
            Ok(t) => Ok(Some((t.tier, t.expires_ns > clock::boot_ns()?))),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(KernelError::map_op("reading", MAP_TIER, e)),
        }
    }
}
