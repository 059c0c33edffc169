//! Where the engine sends the consequences it decides: lockouts and verified tiers.
//!
//! The kernel dataplane implements this (drops at XDP); a daemon running userspace-only uses
//! [`NoKernel`]. Calls must be cheap and must not block the request path.

use std::net::IpAddr;
use std::time::Duration;

use super::decision::Tier;

pub trait EnforcementSink: Send + Sync + 'static {
    /// Lock `ip` out for `duration` at escalation `level` (1 = first lockout).
    fn lock(&self, ip: IpAddr, duration: Duration, level: u32);
    /// Lift a lockout early.
    fn unlock(&self, ip: IpAddr);
    /// `ip` presented a verified credential of `tier`: raise its kernel connection ceiling.
    fn set_tier(&self, ip: IpAddr, tier: Tier);
}

/// Userspace-only operation: nothing to push.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoKernel;

impl EnforcementSink for NoKernel {
    fn lock(&self, _ip: IpAddr, _duration: Duration, _level: u32) {}
    fn unlock(&self, _ip: IpAddr) {}
    fn set_tier(&self, _ip: IpAddr, _tier: Tier) {}
}
