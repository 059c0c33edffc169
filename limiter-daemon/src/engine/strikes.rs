//! Strikes and escalating lockouts: a burst violation is a strike; strike `n` locks the client
//! address for `base × 2^(n−1)` (capped, optionally jittered); one strike is forgiven per
//! `decay` of quiet after a lockout ends. Lockouts go to the store (persisted) and to the
//! enforcement sink (the kernel).
//!
//! A burst lockout lasts at least until the burst window that earned it has room again (its
//! 5 s slots free capacity 60–65 s after use): a lockout ending earlier would answer the
//! caller's first obedient retry with a second strike, and its `Retry-After` would be a lie.
//!
//! A trusted proxy's or allow-listed address is never struck or locked ([`super::exempt`]): the
//! burst is still refused, and nothing else happens.

use std::net::IpAddr;
use std::time::Duration;

use rand::Rng;

use super::base::Engine;
use crate::clock::ceil_secs;
use crate::config::{Config, LockoutSettings};
use crate::model::Decision;
use crate::model::{LockCause, Lockout, StrikeRecord};

/// Strikes left at `now_ms` after decay.
pub fn decayed_strikes(rec: &StrikeRecord, now_ms: u64, decay: Duration) -> u32 {
    let decay_ms = u64::try_from(decay.as_millis()).unwrap_or(u64::MAX);
    if decay_ms == 0 {
        return rec.strikes;
    }
    let quiet = now_ms.saturating_sub(rec.quiet_from_ms);
    let forgiven = u32::try_from(quiet / decay_ms).unwrap_or(u32::MAX);
    rec.strikes.saturating_sub(forgiven)
}

/// The lockout length for escalation `level`, with jitter `r ∈ [0, 1)` applied, capped.
pub fn lock_duration(s: &LockoutSettings, level: u32, r: f64) -> Duration {
    let d = s.duration_for(level);
    let jittered = d.mul_f64(1.0 + s.jitter * r.clamp(0.0, 1.0));
    jittered.min(s.cap)
}

impl Engine {
    /// Strikes `ip` for a burst refused at `now_ms` whose window frees capacity in `frees_ms`,
    /// and makes `d` say so: the lockout's level, and `Retry-After` = the lockout left, or the
    /// time until the other refusing windows have room when that is later (a spent hourly
    /// budget outlasts a first lockout).
    pub(crate) fn burst_strike(
        &self,
        cfg: &Config,
        d: &mut Decision,
        ip: IpAddr,
        now_ms: u64,
        frees_ms: u64,
    ) {
        let Some(lock) = self.strike(cfg, ip, now_ms, frees_ms, LockCause::Burst, None) else {
            return;
        };
        d.lockout_level = Some(lock.level);
        if let (Some(reason), Some(before)) = (d.reason(), d.retry_after_secs()) {
            let locked = ceil_secs(lock.remaining_ms(now_ms)).max(1);
            d.reject(reason, locked.max(before));
        }
    }

    /// Strikes the client at `peer` (grouped) for abusing the protocol, `why`, as a burst
    /// would: an HTTP/2 connection the proxy closed for rapid reset or a frame flood. In
    /// shadow mode it is only logged.
    pub fn abuse_strike(&self, peer: IpAddr, why: &str) -> Option<Lockout> {
        let cfg = self.config();
        if cfg.engine.shadow {
            tracing::info!(%peer, reason = why, "shadow mode: protocol abuse would strike");
            return None;
        }
        let group = crate::identity::client_ip::group(peer, cfg.identity.ipv6_prefix);
        self.strike(
            &cfg,
            group,
            self.clock.now_ms(),
            0,
            LockCause::Burst,
            Some(why),
        )
    }

    /// Records a strike against `ip` (grouped) and locks it for the escalation's duration, but
    /// at least `frees_ms` (until the refusing burst window has room). Returns the lockout in
    /// force, or `None` when `ip` may not be locked by strikes (a trusted proxy, allow-listed).
    /// `cause` and `reason` say why: the address's own burst, or its network's (`reason`
    /// naming the network); both kinds share this one path, and the address's one escalation.
    pub(crate) fn strike(
        &self,
        cfg: &Config,
        ip: IpAddr,
        now_ms: u64,
        frees_ms: u64,
        cause: LockCause,
        reason: Option<&str>,
    ) -> Option<Lockout> {
        if let Some(why) = self.strike_exemption(cfg, ip) {
            tracing::debug!(%ip, exempt = %why, "burst refused; the address is never locked by strikes");
            return None;
        }
        let _serial = self.strike_lock.lock();
        // Two requests may strike at once; the second finds the first's lockout.
        if let Ok(Some(l)) = self.store.lockout(ip) {
            if l.is_active(now_ms) {
                return Some(l);
            }
        }
        let prev = self.store.strikes(ip).ok().flatten();
        let level = prev.map_or(0, |r| decayed_strikes(&r, now_ms, cfg.lockout.decay)) + 1;
        let r = if cfg.lockout.jitter > 0.0 {
            self.rng.lock().gen::<f64>()
        } else {
            0.0
        };
        let duration = lock_duration(&cfg.lockout, level, r).max(Duration::from_millis(frees_ms));
        let until_ms =
            now_ms.saturating_add(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
        let lockout = Lockout {
            ip,
            since_ms: now_ms,
            until_ms,
            level,
            cause,
            reason: reason.map(str::to_string),
        };
        let record = StrikeRecord {
            strikes: level,
            last_strike_ms: now_ms,
            quiet_from_ms: until_ms,
        };
        if let Err(err) = self.store.put_lockout(lockout.clone(), Some(record)) {
            // The kernel still gets it; only persistence across restart is lost.
            tracing::error!(error = %err, "cannot persist a lockout");
        }
        self.sink.lock(ip, duration, level);
        tracing::info!(
            event = "lockout_made",
            %ip,
            level,
            secs = duration.as_secs(),
            cause = cause.as_str(),
            reason = reason.unwrap_or("burst"),
            "burst exceeded: client locked out"
        );
        Some(lockout)
    }
}
