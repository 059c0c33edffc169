//! Lockout administration: list, query, lift (also from the kernel), and lock by hand.

use std::net::IpAddr;
use std::time::Duration;

use super::strikes::decayed_strikes;
use super::{Engine, EngineError};
use crate::identity::client_ip;
use crate::model::{LockCause, Lockout};

pub struct LockoutManager<'a> {
    engine: &'a Engine,
}

impl Engine {
    pub fn lockouts(&self) -> LockoutManager<'_> {
        LockoutManager { engine: self }
    }
}

impl LockoutManager<'_> {
    fn group(&self, ip: IpAddr) -> IpAddr {
        client_ip::group(ip, self.engine.config().identity.ipv6_prefix)
    }

    /// Active lockouts.
    pub fn list(&self) -> Result<Vec<Lockout>, EngineError> {
        Ok(self.engine.store.lockouts(self.engine.clock.now_ms())?)
    }

    /// The active lockout covering `ip` (IPv6 grouped by prefix).
    pub fn get(&self, ip: IpAddr) -> Result<Option<Lockout>, EngineError> {
        let now = self.engine.clock.now_ms();
        Ok(self
            .engine
            .store
            .lockout(self.group(ip))?
            .filter(|l| l.is_active(now)))
    }

    /// Strikes currently held against `ip`, after decay.
    pub fn strikes(&self, ip: IpAddr) -> Result<u32, EngineError> {
        let cfg = self.engine.config();
        let now = self.engine.clock.now_ms();
        Ok(self
            .engine
            .store
            .strikes(self.group(ip))?
            .map_or(0, |r| decayed_strikes(&r, now, cfg.lockout.decay)))
    }

    /// Lifts the lockout of `ip` in the store and the kernel. Strikes stay (escalation goes on).
    pub fn lift(&self, ip: IpAddr) -> Result<Option<Lockout>, EngineError> {
        let g = self.group(ip);
        let removed = self.engine.store.remove_lockout(g)?;
        self.engine.sink.unlock(g);
        if removed.is_some() {
            tracing::info!(event = "lockout_lifted", ip = %g, "lockout lifted");
        }
        Ok(removed)
    }

    /// Locks `ip` by hand for `duration`.
    pub fn lock(&self, ip: IpAddr, duration: Duration) -> Result<Lockout, EngineError> {
        if duration.is_zero() {
            return Err(EngineError::ZeroDuration);
        }
        let now = self.engine.clock.now_ms();
        let g = self.group(ip);
        let l = Lockout {
            ip: g,
            since_ms: now,
            until_ms: now.saturating_add(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)),
            level: 1,
            cause: LockCause::Manual,
        };
        self.engine.store.put_lockout(l, None)?;
        self.engine.sink.lock(g, duration, l.level);
        tracing::info!(event = "lockout_made", ip = %g, secs = duration.as_secs(), cause = "manual", "client locked out by hand");
        Ok(l)
    }
}
