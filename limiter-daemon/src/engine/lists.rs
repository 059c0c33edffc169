//! Allow/deny CIDR lists: allow-listed clients are never metered; deny-listed clients are
//! answered as locked. The lists persist in the store, which is their source of truth; the
//! engine keeps a snapshot for the request path and mirrors every change (and, at start, every
//! live entry) into the enforcement sink, so the kernel's tries hold them too.

use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;

use super::base::{Engine, Runtime};
use super::error::EngineError;
pub use super::list_snapshot::ListSnapshot;
use crate::model::{ListEntry, ListKind};
use crate::store::unreadable::{RecordKind, UnreadableRecord};

/// What `e` has left at `now_ms` (`None`: no expiry).
fn ttl(e: &ListEntry, now_ms: u64) -> Option<Duration> {
    e.until_ms
        .map(|u| Duration::from_millis(u.saturating_sub(now_ms)))
}

pub struct ListManager<'a> {
    engine: &'a Engine,
}

impl Engine {
    pub fn lists(&self) -> ListManager<'_> {
        ListManager { engine: self }
    }

    /// Pushes every live stored list entry into the sink (called at construction, so a reboot,
    /// which empties the kernel's tries, gets them back). Returns how many were pushed.
    pub fn restore_lists(&self) -> usize {
        let now = self.clock.now_ms();
        let rt = self.runtime();
        let mut pushed = 0;
        for (kind, entries) in [
            (ListKind::Allow, &rt.lists.allow),
            (ListKind::Deny, &rt.lists.deny),
        ] {
            for e in entries.iter().filter(|e| e.is_active(now)) {
                self.sink.list_add(kind, e.net, ttl(e, now));
                pushed += 1;
            }
        }
        pushed
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
        self.replace_runtime(|old| Runtime {
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
        self.engine.store.put_list_entry(kind, entry.clone())?;
        self.engine.reload_lists();
        let now = self.engine.clock.now_ms();
        if entry.is_active(now) {
            self.engine.sink.list_add(kind, entry.net, ttl(&entry, now));
        }
        Ok(())
    }

    /// The list's entries the store holds but cannot read (never applied).
    pub fn unreadable(&self, kind: ListKind) -> Result<Vec<UnreadableRecord>, EngineError> {
        Ok(self.engine.store.unreadable(RecordKind::List(kind))?)
    }

    /// Deletes the unreadable entry under the raw field `field`; `false` when there is none.
    pub fn remove_unreadable(&self, kind: ListKind, field: &str) -> Result<bool, EngineError> {
        Ok(self
            .engine
            .store
            .remove_unreadable(RecordKind::List(kind), field)?)
    }

    pub fn remove(&self, kind: ListKind, net: &IpNet) -> Result<bool, EngineError> {
        let net = net.trunc();
        let removed = self.engine.store.remove_list_entry(kind, &net)?;
        self.engine.reload_lists();
        self.engine.sink.list_remove(kind, net);
        Ok(removed)
    }
}
