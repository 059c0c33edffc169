//! How full the maps that fill up are (lockouts, tiers, buckets, allow, deny): entries used
//! against capacity, for `kernel status` and the metrics.

use limiter_common::maps::{MAP_ALLOW, MAP_BUCKET, MAP_DENY, MAP_LOCKOUT, MAP_TIER};
use serde::Serialize;

use super::capacity::Capacity;
use super::handle::KernelMaps;
use crate::kernel::KernelError;

/// Entries used against capacity for one map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MapFill {
    pub name: &'static str,
    pub entries: u32,
    pub capacity: u32,
}

impl KernelMaps {
    /// Entries used against capacity, for the maps that fill up.
    pub fn fill(&self) -> Result<Vec<MapFill>, KernelError> {
        let count_err = |name| move |e| KernelError::map_op("counting", name, e);
        let lockout = self.lockout.hash();
        let tier = self.tier.read();
        let allow = self.allow.read();
        let deny = self.deny.read();
        Ok(vec![
            MapFill {
                name: MAP_LOCKOUT,
                entries: count(lockout.keys()).map_err(count_err(MAP_LOCKOUT))?,
                capacity: lockout.map_capacity(),
            },
            MapFill {
                name: MAP_TIER,
                entries: count(tier.keys()).map_err(count_err(MAP_TIER))?,
                capacity: tier.map_capacity(),
            },
            MapFill {
                name: MAP_BUCKET,
                entries: count(self.bucket.keys()).map_err(count_err(MAP_BUCKET))?,
                capacity: self.bucket.map_capacity(),
            },
            MapFill {
                name: MAP_ALLOW,
                entries: count(allow.keys()).map_err(count_err(MAP_ALLOW))?,
                capacity: allow.map_capacity(),
            },
            MapFill {
                name: MAP_DENY,
                entries: count(deny.keys()).map_err(count_err(MAP_DENY))?,
                capacity: deny.map_capacity(),
            },
        ])
    }
}

/// Counts keys by walking them: the kernel keeps no entry count for these map types.
fn count<K>(
    keys: impl Iterator<Item = Result<K, aya::maps::MapError>>,
) -> Result<u32, aya::maps::MapError> {
    let mut n = 0u32;
    for k in keys {
        k?;
        n = n.saturating_add(1);
    }
    Ok(n)
}
