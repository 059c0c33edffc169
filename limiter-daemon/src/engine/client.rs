//! One client's state for the admin API: its tier limits, current window use, strikes and
//! lockout, looked up by address (anonymous/session counters).

use std::net::IpAddr;
use std::sync::Arc;

use super::base::Engine;
use super::error::EngineError;
use crate::identity::client_ip;
use crate::model::{Lockout, PerWindow, Tier, WindowKind};
use crate::store::count::Usage;

#[derive(Clone, Debug, PartialEq)]
pub struct ClientReport {
    /// The address counters use (IPv6 grouped).
    pub group: IpAddr,
    /// Hashed identity, as decisions report it.
    pub identity: String,
    /// Counters of the address; `None` when it has none live.
    pub usage: Option<Usage>,
    pub strikes: u32,
    pub lockout: Option<Lockout>,
    pub allow_listed: bool,
    pub deny_listed: bool,
    /// Anonymous limits (the address's own rung without a credential), per window; `None` where
    /// a window never meters an address alone (the key window needs a key).
    pub anon: PerWindow<Option<u32>>,
}

impl Engine {
    pub fn client(&self, ip: IpAddr) -> Result<ClientReport, EngineError> {
        let cfg = self.config();
        let now = self.clock.now_ms();
        let group = client_ip::group(ip, cfg.identity.ipv6_prefix);
        let id = self.hasher.ip_id(group);
        let lists = Arc::clone(&self.runtime().lists);
        let anon = cfg.tiers.get(Tier::Anon);
        Ok(ClientReport {
            group,
            identity: id.display(),
            usage: self.store.usage(&id, now)?,
            strikes: self.lockouts().strikes(ip)?,
            lockout: self.lockouts().get(ip)?,
            allow_listed: lists.allows(ip),
            deny_listed: lists.denies(ip, now).is_some(),
            anon: PerWindow::from_fn(|kind| match kind {
                WindowKind::Burst => Some(anon.burst.get()),
                WindowKind::Hourly => Some(anon.hourly.get()),
                WindowKind::Daily => anon.daily.map(|d| d.get()),
                WindowKind::KeyHourly => None,
            }),
        })
    }
}
