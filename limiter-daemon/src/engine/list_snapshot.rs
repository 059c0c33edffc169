//! [`ListSnapshot`]: the allow/deny lists as the request path reads them, a copy of the store's
//! taken whenever a list changes (see [`super::lists`]).

use std::net::IpAddr;

use crate::model::ListEntry;

#[derive(Clone, Debug, Default)]
pub struct ListSnapshot {
    pub allow: Vec<ListEntry>,
    pub deny: Vec<ListEntry>,
}

impl ListSnapshot {
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.allow.iter().any(|e| e.net.contains(&ip))
    }

    /// `Some(until)` when a live deny entry covers `ip` (`until = None`: no expiry).
    pub fn denies(&self, ip: IpAddr, now_ms: u64) -> Option<Option<u64>> {
        self.deny_entry(ip, now_ms).map(|e| e.until_ms)
    }

    /// The live deny entry covering `ip`.
    pub fn deny_entry(&self, ip: IpAddr, now_ms: u64) -> Option<&ListEntry> {
        self.deny
            .iter()
            .find(|e| e.is_active(now_ms) && e.net.contains(&ip))
    }
}
