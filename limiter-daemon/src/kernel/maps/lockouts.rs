//! Lockouts: locking and unlocking an address, and reading lockouts back. Every write goes through
//! the [`LockoutTable`](crate::kernel::lockout_cache::LockoutTable), which keeps the lockout hash
//! and its cache consistent; this file turns an address into the kernel's key and a duration into
//! a kernel-clock deadline.

use std::net::IpAddr;
use std::time::Duration;

use limiter_common::maps::MAP_LOCKOUT;
use limiter_common::Lockout;
use serde::Serialize;

use super::capacity::full_or;
use super::handle::KernelMaps;
use super::opt_secs;
use crate::kernel::addr::{ip_key, key_ip};
use crate::kernel::clock;
use crate::kernel::error::is_not_found;
use crate::kernel::KernelError;

/// A lockout as read back from the kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LockoutView {
    pub ip: IpAddr,
    pub level: u32,
    /// Time left; `None` when the deadline has passed (the kernel no longer drops).
    #[serde(with = "opt_secs")]
    pub remaining: Option<Duration>,
}

impl KernelMaps {
    /// Locks `ip` out for `duration` at `level`; returns the kernel-clock deadline written.
    pub fn lock(&self, ip: IpAddr, duration: Duration, level: u32) -> Result<u64, KernelError> {
        let deadline_ns = clock::deadline_after(duration)?;
        self.lock_until(ip, deadline_ns, level)?;
        Ok(deadline_ns)
    }

    /// Locks `ip` until `deadline_ns` (`CLOCK_BOOTTIME`), e.g. restoring a lockout from a store.
    pub fn lock_until(&self, ip: IpAddr, deadline_ns: u64, level: u32) -> Result<(), KernelError> {
        let key = ip_key(ip, self.v6_prefix()?);
        let value = Lockout {
            deadline_ns,
            level,
            _reserved: 0,
        };
        self.lockout
            .lock(key, value, |e, map| full_or(e, "writing", MAP_LOCKOUT, map))
    }

    /// Lifts a lockout; `false` when there was none.
    pub fn unlock(&self, ip: IpAddr) -> Result<bool, KernelError> {
        let key = ip_key(ip, self.v6_prefix()?);
        self.lockout.unlock(&key)
    }

    /// Makes the lockout cache consistent with the lockout hash (see
    /// [`LockoutTable::rebuild`](crate::kernel::lockout_cache::LockoutTable::rebuild)); the
    /// dataplane runs it before attaching.
    pub fn rebuild_lockout_cache(&self) -> Result<(), KernelError> {
        self.lockout.rebuild()
    }

    /// The kernel's lockout for `ip`, if any (expired ones included, with `remaining: None`).
    pub fn lockout(&self, ip: IpAddr) -> Result<Option<LockoutView>, KernelError> {
        let key = ip_key(ip, self.v6_prefix()?);
        let now = clock::boot_ns()?;
        match self.lockout.hash().get(&key, 0) {
            Ok(l) => Ok(Some(LockoutView {
                ip: key_ip(&key),
                level: l.level,
                remaining: clock::remaining(l.deadline_ns, now),
            })),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(KernelError::map_op("reading", MAP_LOCKOUT, e)),
        }
    }

    /// Every lockout in the kernel map.
    pub fn lockouts(&self) -> Result<Vec<LockoutView>, KernelError> {
        let now = clock::boot_ns()?;
        let map = self.lockout.hash();
        let mut out = Vec::new();
        for item in map.iter() {
            let (key, l) = item.map_err(|e| KernelError::map_op("listing", MAP_LOCKOUT, e))?;
            out.push(LockoutView {
                ip: key_ip(&key),
                level: l.level,
                remaining: clock::remaining(l.deadline_ns, now),
            });
        }
        Ok(out)
    }
}
