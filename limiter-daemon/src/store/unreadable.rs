//! Records a shared store holds but cannot use: a value that does not parse, or holds what no
//! daemon writes (a reason past the admin API's bound, a deadline no date can write). One such
//! record is skipped wherever records are read, so it never takes the rest with it (a list,
//! the lockouts, the keys); it is logged once per process and counted per kind
//! ([`Unreadable`], the `store_records_unreadable` metric), and the admin API lists and
//! deletes it by its raw name ([`UnreadableRecord`]).
//!
//! [`check_lockout`], [`check_event`] and [`check_list_entry`] are the bounds a record read back must meet.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::lockout_events::LockoutEvent;
use crate::model::{ListEntry, ListKind, Lockout};

/// A reason (lockout or list entry) longer than the admin API accepts.
pub const MAX_REASON_BYTES: usize = 200;
/// The last millisecond of 9999-12-31, the latest deadline RFC 3339 can write.
pub const MAX_DEADLINE_MS: u64 = 253_402_300_799_999;
/// The longest lockout the admin API makes: ten years.
pub const MAX_LOCKOUT_MS: u64 = 3650 * 86_400_000;
/// A host name on the lockout stream past this is not one a daemon wrote.
pub const MAX_HOST_BYTES: usize = 255;

/// Unreadable records remembered (so each is logged and counted once) at most.
const MAX_REMEMBERED: usize = 10_000;

/// What kind of record (the metric's `kind` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordKind {
    Lockout,
    Strikes,
    Key,
    List(ListKind),
    /// An entry of the lockout stream.
    Stream,
}

impl RecordKind {
    pub const ALL: [RecordKind; 6] = [
        RecordKind::Lockout,
        RecordKind::Strikes,
        RecordKind::Key,
        RecordKind::List(ListKind::Allow),
        RecordKind::List(ListKind::Deny),
        RecordKind::Stream,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Lockout => "lockout",
            RecordKind::Strikes => "strikes",
            RecordKind::Key => "key",
            RecordKind::List(ListKind::Allow) => "list_allow",
            RecordKind::List(ListKind::Deny) => "list_deny",
            RecordKind::Stream => "stream",
        }
    }

    fn index(self) -> usize {
        RecordKind::ALL
            .iter()
            .position(|k| *k == self)
            .unwrap_or_default()
    }
}

/// One record skipped, as the admin API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnreadableRecord {
    pub kind: RecordKind,
    /// The store's key (`<prefix>list:deny`, `<prefix>key:<id>`).
    pub key: String,
    /// The hash field, for a list entry (the raw network text), or the ID of a stream entry.
    pub field: Option<String>,
    /// The key's id, for an API key record (what `DELETE /admin/v1/keys/{id}` takes).
    pub id: Option<String>,
    /// Why it was skipped (the parse error or the bound; never the value itself).
    pub error: String,
}

impl UnreadableRecord {
    /// The key, or `key` field `field`: what the log names.
    pub fn name(&self) -> String {
        match &self.field {
            Some(f) => format!("{} field {f:?}", self.key),
            None => self.key.clone(),
        }
    }
}

/// What one store found unreadable since start: counted per kind, each logged once.
#[derive(Debug, Default)]
pub struct Unreadable {
    logged: Mutex<HashSet<(RecordKind, String)>>,
    counts: [AtomicU64; RecordKind::ALL.len()],
}

impl Unreadable {
    /// Notes a skipped record: the first time this process meets it, a warning naming its key
    /// (or stream ID) and a count. Read again later (every list read), it is neither.
    pub fn found(&self, r: &UnreadableRecord) {
        let name = r.name();
        {
            let mut logged = self.logged.lock();
            // Past the cap (whoever writes to the store could add bad entries without end)
            // a record is counted each time it is met, and no longer remembered.
            if logged.len() >= MAX_REMEMBERED {
                self.counts[r.kind.index()].fetch_add(1, Ordering::Relaxed);
                return;
            }
            if !logged.insert((r.kind, name.clone())) {
                return;
            }
        }
        self.counts[r.kind.index()].fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            event = "store_record_unreadable",
            kind = r.kind.as_str(),
            key = %name,
            error = %r.error,
            "a record in the store cannot be read: skipped (the rest is used); list it with the \
             admin API and delete it, or fix it in the store"
        );
    }

    /// A record deleted: met again, it is logged again.
    pub fn forget(&self, r: &UnreadableRecord) {
        self.logged.lock().remove(&(r.kind, r.name()));
    }

    /// Records found per kind since start.
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        RecordKind::ALL
            .iter()
            .map(|k| (k.as_str(), self.counts[k.index()].load(Ordering::Relaxed)))
            .collect()
    }
}

/// A lockout as a daemon writes it: a bounded reason and a deadline a date can write, at
/// most ten years after it began.
pub fn check_lockout(l: &Lockout) -> Result<(), String> {
    if l.reason
        .as_ref()
        .is_some_and(|r| r.len() > MAX_REASON_BYTES)
    {
        return Err(format!("reason longer than {MAX_REASON_BYTES} bytes"));
    }
    check_deadline(l.until_ms)?;
    if l.until_ms.saturating_sub(l.since_ms) > MAX_LOCKOUT_MS {
        return Err("lasts longer than 3650 days".into());
    }
    Ok(())
}

/// A lockout stream entry as a daemon writes it: its lockout within bounds, a prefix
/// lockout's deadline a date (or none: `u64::MAX`), a bounded reason and host name.
pub fn check_event(e: &LockoutEvent) -> Result<(), String> {
    if e.host().len() > MAX_HOST_BYTES {
        return Err(format!("host longer than {MAX_HOST_BYTES} bytes"));
    }
    match e {
        LockoutEvent::Locked { lockout, .. } => check_lockout(lockout),
        LockoutEvent::NetLocked {
            until_ms, reason, ..
        } => {
            if reason.len() > MAX_REASON_BYTES {
                return Err(format!("reason longer than {MAX_REASON_BYTES} bytes"));
            }
            if *until_ms == u64::MAX {
                return Ok(());
            }
            check_deadline(*until_ms)
        }
        LockoutEvent::Lifted { .. } | LockoutEvent::NetLifted { .. } => Ok(()),
    }
}

/// A list entry as a daemon writes it.
pub fn check_list_entry(e: &ListEntry) -> Result<(), String> {
    if e.comment.len() > MAX_REASON_BYTES {
        return Err(format!("reason longer than {MAX_REASON_BYTES} bytes"));
    }
    e.until_ms.map_or(Ok(()), check_deadline)
}

/// A deadline RFC 3339 can write (the admin API and the logs print every one).
pub fn check_deadline(until_ms: u64) -> Result<(), String> {
    if until_ms > MAX_DEADLINE_MS {
        return Err(format!("until_ms {until_ms} is past the year 9999"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::LockCause;

    fn lock(since_ms: u64, until_ms: u64, reason: Option<String>) -> Lockout {
        Lockout {
            ip: "192.0.2.1".parse().unwrap(),
            since_ms,
            until_ms,
            level: 1,
            cause: LockCause::Manual,
            reason,
        }
    }

    #[test]
    fn lockouts_past_the_bounds_are_refused() {
        let now = 1_767_225_600_000;
        assert!(check_lockout(&lock(now, now + 60_000, Some("ok".into()))).is_ok());
        assert!(check_lockout(&lock(now, u64::MAX, None)).is_err());
        assert!(check_lockout(&lock(now, now + MAX_LOCKOUT_MS + 1, None)).is_err());
        assert!(check_lockout(&lock(now, now + 1, Some("x".repeat(201)))).is_err());
    }

    #[test]
    fn each_record_is_counted_and_logged_once() {
        let u = Unreadable::default();
        let r = UnreadableRecord {
            kind: RecordKind::List(ListKind::Deny),
            key: "lim:list:deny".into(),
            field: Some("garbage".into()),
            id: None,
            error: "expected value".into(),
        };
        u.found(&r);
        u.found(&r);
        assert!(u.counts().contains(&("list_deny", 1)));
        u.forget(&r);
        u.found(&r);
        assert!(u.counts().contains(&("list_deny", 2)));
    }
}
