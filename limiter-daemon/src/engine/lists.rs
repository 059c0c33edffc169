//! Allow/deny CIDR lists: allow-listed clients are never metered; deny-listed clients are
//! answered as locked. The lists persist in the store; the engine keeps a snapshot for the
//! request path.

use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use super::{Engine, EngineError};
use crate::store::records::{ListEntry, ListKind};

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
        self.deny
            .iter()
            .find(|e| e.is_active(now_ms) && e.net.contains(&ip))
            .map(|e| e.until_ms)
    }
}

pub struct ListManager<'a> {
    engine: &'a Engine,
}

impl Engine {
    pub fn lists(&self) -> ListManager<'_> {
        ListManager { engine: self }
    }

    /// Re-reads the lists from the store into the request-path snapshot.
    pub(crate) fn reload_lists(&self) {
        let read = |k| {
            self.store.list(k).unwrap_or_else(|err| {
                tracing::error!(error = %err, "cannot read a list from the store");
                Vec::new()
            })
        };
        let snap = ListSnapshot {
            allow: read(ListKind::Allow),
            deny: read(ListKind::Deny),
        };
        self.replace_runtime(|old| super::Runtime {
            cfg: Arc::clone(&old.cfg),
            resolver: Arc::clone(&old.resolver),
            lists: Arc::new(snap),
        });
    }
}

impl ListManager<'_> {
    pub fn list(&self, kind: ListKind) -> Result<Vec<ListEntry>, EngineError> {
        Ok(self.engine.store.list(kind)?)
    }

    pub fn add(&self, kind: ListKind, entry: ListEntry) -> Result<(), EngineError> {
        let entry = ListEntry {
            net: entry.net.trunc(),
            ..entry
        };
        self.engine.store.put_list_entry(kind, entry)?;
        self.engine.reload_lists();
        Ok(())
    }

    pub fn remove(&self, kind: ListKind, net: &IpNet) -> Result<bool, EngineError> {
        let removed = self.engine.store.remove_list_entry(kind, &net.trunc())?;
        self.engine.reload_lists();
        Ok(removed)
    }
}
