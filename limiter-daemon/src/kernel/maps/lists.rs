//! The allow and deny lists: two LPM tries of CIDRs (`LIM_ALLOW`, `LIM_DENY`), a deny entry with
//! an optional deadline. Each change ends by syncing the list flags ([`super::list_flags`]).

use std::time::Duration;

use aya::maps::lpm_trie::LpmTrie;
use aya::maps::MapData;
use ipnet::IpNet;
use limiter_common::maps::{AllowMark, CidrBytes, MAP_ALLOW, MAP_DENY};
use limiter_common::DenyEntry;
use serde::Serialize;

use super::capacity::{full_or_trie, Capacity};
use super::handle::KernelMaps;
use super::opt_secs;
use crate::kernel::addr::{cidr_key, key_cidr};
use crate::kernel::clock;
use crate::kernel::error::is_not_found;
use crate::kernel::KernelError;

/// A deny-list entry as read back from the kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DenyView {
    pub cidr: IpNet,
    /// `None`: no expiry.
    #[serde(with = "opt_secs")]
    pub remaining: Option<Duration>,
    pub expired: bool,
}

impl KernelMaps {
    pub fn allow_add(&self, net: IpNet) -> Result<(), KernelError> {
        {
            let mut map = self.allow.write();
            map.insert(&cidr_key(net), AllowMark::from(1u8), 0)
                .map_err(|e| full_or_trie(e, "writing", MAP_ALLOW, map.map_capacity()))?;
        }
        self.sync_list_flags()
    }

    pub fn allow_remove(&self, net: IpNet) -> Result<bool, KernelError> {
        let removed = remove_cidr(&mut self.allow.write(), net, MAP_ALLOW)?;
        self.sync_list_flags()?;
        Ok(removed)
    }

    pub fn allow_list(&self) -> Result<Vec<IpNet>, KernelError> {
        let map = self.allow.read();
        let mut out = Vec::new();
        for key in map.keys() {
            let key = key.map_err(|e| KernelError::map_op("listing", MAP_ALLOW, e))?;
            out.extend(key_cidr(&key));
        }
        Ok(out)
    }

    /// Denies `net`, for `duration` or (None) until removed.
    pub fn deny_add(&self, net: IpNet, duration: Option<Duration>) -> Result<(), KernelError> {
        let deadline_ns = match duration {
            Some(d) => clock::deadline_after(d)?,
            None => 0,
        };
        {
            let mut map = self.deny.write();
            map.insert(&cidr_key(net), DenyEntry { deadline_ns }, 0)
                .map_err(|e| full_or_trie(e, "writing", MAP_DENY, map.map_capacity()))?;
        }
        self.sync_list_flags()
    }

    pub fn deny_remove(&self, net: IpNet) -> Result<bool, KernelError> {
        let removed = remove_cidr(&mut self.deny.write(), net, MAP_DENY)?;
        self.sync_list_flags()?;
        Ok(removed)
    }

    pub fn deny_list(&self) -> Result<Vec<DenyView>, KernelError> {
        let now = clock::boot_ns()?;
        let map = self.deny.read();
        let mut out = Vec::new();
        for item in map.iter() {
            let (key, entry) = item.map_err(|e| KernelError::map_op("listing", MAP_DENY, e))?;
            let Some(cidr) = key_cidr(&key) else { continue };
            let (remaining, expired) = if entry.deadline_ns == 0 {
                (None, false)
            } else {
                let left = clock::remaining(entry.deadline_ns, now);
                (left, left.is_none())
            };
            out.push(DenyView {
                cidr,
                remaining,
                expired,
            });
        }
        Ok(out)
    }
}

fn remove_cidr<V: aya::Pod>(
    map: &mut LpmTrie<MapData, CidrBytes, V>,
    net: IpNet,
    name: &'static str,
) -> Result<bool, KernelError> {
    match map.remove(&cidr_key(net)) {
        Ok(()) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(KernelError::map_op("removing from", name, e)),
    }
}
