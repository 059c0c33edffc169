//! Lockout administration: list, query, lift (also from the kernel), and lock by hand, one
//! address (the lockout map) or a CIDR (the deny trie with a deadline).

use std::net::IpAddr;
use std::time::Duration;

use super::base::Engine;
use super::error::EngineError;
use super::strikes::decayed_strikes;
use crate::identity::client_ip;
use ipnet::IpNet;

use crate::model::{ListEntry, ListKind, LockCause, Lockout};

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

    /// An operator's lockout of `net` is refused when it holds a trusted proxy.
    fn refuse_trusted_proxy(&self, net: IpNet) -> Result<(), EngineError> {
        match super::exempt::trusted_proxy_in(&self.engine.config(), &net) {
            Some(proxy) => Err(EngineError::TrustedProxy { net, proxy }),
            None => Ok(()),
        }
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

    /// Forgets the strikes held against `ip` (IPv6 grouped by prefix), in the store (on a fleet,
    /// on every host): its next burst strikes at level 1 again. `None`: it held no strike
    /// record; else the strikes it held, after decay.
    pub fn forget_strikes(&self, ip: IpAddr) -> Result<Option<u32>, EngineError> {
        let cfg = self.engine.config();
        let now = self.engine.clock.now_ms();
        let g = self.group(ip);
        let held = self
            .engine
            .store
            .strikes(g)?
            .map(|r| decayed_strikes(&r, now, cfg.lockout.decay));
        let had = self.engine.store.forget_strikes(g)?;
        if had || held.is_some() {
            tracing::info!(event = "strikes_forgotten", ip = %g, strikes = held.unwrap_or(0), "strikes forgotten");
            return Ok(Some(held.unwrap_or(0)));
        }
        Ok(None)
    }

    /// Lifts the lockout of `ip` in the store and the kernel. Strikes stay (escalation goes on;
    /// [`Self::forget_strikes`] forgets them).
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
        self.lock_because(ip, duration, None)
    }

    /// Locks `ip` by hand for `duration`, keeping the operator's `reason` with the lockout (an
    /// empty reason is none).
    pub fn lock_because(
        &self,
        ip: IpAddr,
        duration: Duration,
        reason: Option<&str>,
    ) -> Result<Lockout, EngineError> {
        if duration.is_zero() {
            return Err(EngineError::ZeroDuration);
        }
        let g = self.group(ip);
        self.refuse_trusted_proxy(super::exempt::group_net(&self.engine.config(), g))?;
        let now = self.engine.clock.now_ms();
        let l = Lockout {
            ip: g,
            since_ms: now,
            until_ms: now.saturating_add(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)),
            level: 1,
            cause: LockCause::Manual,
            reason: reason.filter(|r| !r.is_empty()).map(str::to_string),
        };
        self.engine.store.put_lockout(l.clone(), None)?;
        self.engine.sink.lock(g, duration, l.level);
        tracing::info!(event = "lockout_made", ip = %g, secs = duration.as_secs(), cause = "manual", "client locked out by hand");
        Ok(l)
    }
}

/// Deny-list entries made by a CIDR lockout carry this before the operator's reason, so the
/// lockout listing finds them and the deny list still shows why they are there.
pub const CIDR_LOCKOUT_MARK: &str = "lockout: ";

/// One active lockout as the admin API lists it: an address (the lockout map) or a CIDR (the
/// deny trie, with a deadline).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockoutItem {
    pub net: IpNet,
    pub until_ms: u64,
    pub level: u32,
    pub reason: String,
    /// `strikes` (made by the engine) or `operator` (the admin API or the kernel CLI).
    pub source: &'static str,
    /// Why: `burst` (the address's own), `network` (its network's burst; `reason` names the
    /// network) or `manual`.
    pub cause: LockCause,
}

/// Where a lockout of `net` goes: a single address (grouped) or a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockTarget {
    Addr(IpAddr),
    Net(IpNet),
}

impl LockTarget {
    /// Checks the prefix range (IPv4 /8–/32, IPv6 /16–/128); a full-length prefix is one address.
    /// An IPv4-mapped CIDR is bounded as the IPv4 CIDR it is (`::ffff:0:0/96` is all of IPv4).
    pub fn of(net: IpNet) -> Result<LockTarget, EngineError> {
        let net = limiter_common::args::lockable(net)?;
        if net.prefix_len() == net.max_prefix_len() {
            Ok(LockTarget::Addr(net.addr()))
        } else {
            Ok(LockTarget::Net(net))
        }
    }
}

fn item_of(l: &Lockout) -> LockoutItem {
    LockoutItem {
        net: IpNet::from(l.ip),
        until_ms: l.until_ms,
        level: l.level,
        // The operator's text when there is one, else the cause (what older records show).
        reason: match (&l.reason, l.cause) {
            (Some(r), _) => r.clone(),
            (None, LockCause::Burst) => "burst".to_string(),
            (None, LockCause::Manual) => "manual".to_string(),
            (None, LockCause::Network) => "network".to_string(),
        },
        source: match l.cause {
            LockCause::Burst | LockCause::Network => "strikes",
            LockCause::Manual => "operator",
        },
        cause: l.cause,
    }
}

impl LockoutManager<'_> {
    /// Every active lockout, addresses and CIDRs, ordered by address then prefix (the order
    /// the admin API pages through).
    pub fn all(&self) -> Result<Vec<LockoutItem>, EngineError> {
        let now = self.engine.clock.now_ms();
        let mut items: Vec<LockoutItem> = self.list()?.iter().map(item_of).collect();
        for e in self.engine.store.list(ListKind::Deny)? {
            let (Some(reason), Some(until)) =
                (e.comment.strip_prefix(CIDR_LOCKOUT_MARK), e.until_ms)
            else {
                continue;
            };
            if e.is_active(now) {
                // A network's lockout says its level; an operator's range is level 1.
                let by_strikes = e.comment.starts_with(super::networks::NETWORK_LOCKOUT_MARK);
                let level = reason
                    .rsplit_once(", level ")
                    .filter(|_| by_strikes)
                    .and_then(|(_, n)| n.parse().ok())
                    .unwrap_or(1);
                items.push(LockoutItem {
                    net: e.net,
                    until_ms: until,
                    level,
                    reason: reason.to_string(),
                    source: if by_strikes { "strikes" } else { "operator" },
                    cause: if by_strikes {
                        LockCause::Network
                    } else {
                        LockCause::Manual
                    },
                });
            }
        }
        items.sort_by(|a, b| {
            (a.net.addr(), a.net.prefix_len()).cmp(&(b.net.addr(), b.net.prefix_len()))
        });
        Ok(items)
    }

    /// Locks `net` for `duration`: an address into the lockout map (and the store's lockout), a
    /// range into the deny trie with a deadline (and the store's deny list). One call writes both
    /// the store and the kernel.
    pub fn lock_target(
        &self,
        target: LockTarget,
        duration: Duration,
        reason: &str,
    ) -> Result<LockoutItem, EngineError> {
        match target {
            LockTarget::Addr(ip) => {
                let l = self.lock_because(ip, duration, Some(reason))?;
                Ok(item_of(&l))
            }
            LockTarget::Net(net) => {
                if duration.is_zero() {
                    return Err(EngineError::ZeroDuration);
                }
                self.refuse_trusted_proxy(net)?;
                let now = self.engine.clock.now_ms();
                let until =
                    now.saturating_add(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
                self.engine.lists().add(
                    ListKind::Deny,
                    ListEntry {
                        net,
                        until_ms: Some(until),
                        comment: format!("{CIDR_LOCKOUT_MARK}{reason}"),
                    },
                )?;
                Ok(LockoutItem {
                    net,
                    until_ms: until,
                    level: 1,
                    reason: reason.to_string(),
                    source: "operator",
                    cause: LockCause::Manual,
                })
            }
        }
    }

    /// Lifts the lockout of `target` from the store and the kernel; `false` when there was none
    /// (a range must have been locked as a lockout, not deny-listed, to be lifted here).
    pub fn lift_target(&self, target: LockTarget) -> Result<bool, EngineError> {
        match target {
            LockTarget::Addr(ip) => {
                let had = self.get(ip)?.is_some();
                let removed = self.lift(ip)?;
                Ok(had || removed.is_some())
            }
            LockTarget::Net(net) => {
                let is_lockout = self
                    .engine
                    .store
                    .list(ListKind::Deny)?
                    .iter()
                    .any(|e| e.net == net && e.comment.starts_with(CIDR_LOCKOUT_MARK));
                if !is_lockout {
                    return Ok(false);
                }
                self.engine.lists().remove(ListKind::Deny, &net)
            }
        }
    }
}
