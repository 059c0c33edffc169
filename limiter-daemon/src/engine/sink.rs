//! Where the engine sends the consequences it decides: lockouts, verified tiers, and the
//! persisted allow/deny lists (the store is their source of truth; the kernel's tries follow).
//!
//! The kernel dataplane implements this (drops at XDP); a daemon running userspace-only uses
//! [`NoKernel`]. Calls must be cheap and must not block the request path.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;

use crate::model::ListKind;
use crate::model::Tier;

pub trait EnforcementSink: Send + Sync + 'static {
    /// Lock `ip` out for `duration` at escalation `level` (1 = first lockout).
    fn lock(&self, ip: IpAddr, duration: Duration, level: u32);
    /// Lift a lockout early.
    fn unlock(&self, ip: IpAddr);
    /// `ip` presented a verified credential of `tier`: raise its kernel connection ceiling.
    fn set_tier(&self, ip: IpAddr, tier: Tier);
    /// Put `net` on the kernel's allow or deny list; `ttl` (deny only) is how long it has left,
    /// `None` = until removed. Defaults to nothing (sinks without lists).
    fn list_add(&self, _kind: ListKind, _net: IpNet, _ttl: Option<Duration>) {}
    /// Take `net` off the kernel's allow or deny list.
    fn list_remove(&self, _kind: ListKind, _net: IpNet) {}
}

/// Userspace-only operation: nothing to push.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoKernel;

impl EnforcementSink for NoKernel {
    fn lock(&self, _ip: IpAddr, _duration: Duration, _level: u32) {}
    fn unlock(&self, _ip: IpAddr) {}
    fn set_tier(&self, _ip: IpAddr, _tier: Tier) {}
}
