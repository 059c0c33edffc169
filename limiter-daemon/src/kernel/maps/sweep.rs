//! The expiry sweep: removes lockouts and deny entries whose deadline has passed. The program
//! only ignores an expired entry; nothing but this sweep frees its slot.

use aya::maps::lpm_trie::Key;
use limiter_common::maps::{CidrBytes, MAP_DENY};

use super::handle::KernelMaps;
use crate::kernel::clock;
use crate::kernel::error::is_not_found;
use crate::kernel::KernelError;

/// What a sweep removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub lockouts: u32,
    pub denies: u32,
}

impl KernelMaps {
    /// Removes expired lockouts and deny entries. The lockout map is a plain hash (so a flood
    /// cannot evict a ban), which means nothing else ever frees its slots.
    pub fn sweep_expired(&self) -> Result<Swept, KernelError> {
        let now = clock::boot_ns()?;
        let mut swept = Swept {
            lockouts: self.lockout.sweep(now)?,
            denies: 0,
        };
        let expired: Vec<Key<CidrBytes>> = self
            .deny
            .read()
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, d)| d.deadline_ns != 0 && d.deadline_ns <= now)
            .map(|(k, _)| k)
            .collect();
        for key in &expired {
            // Checked again under the lock: the entry may have been renewed since the scan.
            let mut map = self.deny.write();
            match map.get(key, 0) {
                Ok(d) if d.deadline_ns != 0 && d.deadline_ns <= now => {}
                _ => continue,
            }
            match map.remove(key) {
                Ok(()) => swept.denies += 1,
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(KernelError::map_op("removing from", MAP_DENY, e)),
            }
        }
        if swept.denies > 0 {
            self.sync_list_flags()?;
        }
        Ok(swept)
    }
}
