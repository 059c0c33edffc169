//! What operators and lockouts keep in Valkey, as async calls on the shared connection: API
//! keys as hashes (`HGETALL`-readable; the secret only as its hash; records written as JSON
//! strings before still read), lockouts and strikes as JSON with TTLs (written by
//! [`put_lockout.lua`](put_lockout.lua): the longer lockout wins), allow/deny lists as hashes,
//! and the read-only view of one identity's counters.

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;
use redis::Value;

use super::checked::parse;
use super::conn::{check, err, Topology};
use super::inner::Inner;
use super::script::iso8601;
use crate::identity::hash::IdKey;
use crate::model::{
    KeyRecord, ListEntry, ListKind, Lockout, PerWindow, Shape, StrikeRecord, WindowKind,
};
use crate::store::count::Usage;
use crate::store::error::StoreError;
use crate::store::lockout_events::LockoutEvent;
use crate::store::unreadable::{check_list_entry, check_lockout, RecordKind, UnreadableRecord};
use crate::store::windows;

const STRIKE_TTL_MS: u64 = 7 * 86_400_000;

pub fn lockout_script() -> redis::Script {
    redis::Script::new(include_str!("put_lockout.lua"))
}

/// A sliding window's hash as read: `(5 s slot number, count)`.
type RingSlots = Vec<(u64, u32)>;

/// A key record as hash fields (absent options are absent fields).
fn key_fields(r: &KeyRecord) -> Result<Vec<(&'static str, String)>, StoreError> {
    let tier = match serde_json::to_value(r.tier) {
        Ok(serde_json::Value::String(s)) => s,
        other => return Err(err("put_key", format!("tier encodes as {other:?}"))),
    };
    let mut v = vec![
        ("id", r.id.clone()),
        ("secret_hash", r.secret_hash.clone()),
        ("tier", tier),
        ("hourly_limit", r.hourly_limit.to_string()),
        ("created_ms", r.created_ms.to_string()),
    ];
    if let Some(o) = &r.owner {
        v.push(("owner", o.clone()));
    }
    if let Some(n) = &r.note {
        v.push(("note", n.clone()));
    }
    if let Some(t) = r.revoked_ms {
        v.push(("revoked_ms", t.to_string()));
    }
    Ok(v)
}

/// A key record from its hash fields.
fn key_from_fields(key: &str, f: &HashMap<String, String>) -> Result<KeyRecord, StoreError> {
    let bad = |field: &str| err("key", format!("{key}: field {field} missing or malformed"));
    let text = |field: &str| f.get(field).cloned().ok_or_else(|| bad(field));
    let num = |field: &str| text(field)?.parse::<u64>().map_err(|_| bad(field));
    Ok(KeyRecord {
        id: text("id")?,
        secret_hash: text("secret_hash")?,
        tier: serde_json::from_value(serde_json::Value::String(text("tier")?))
            .map_err(|_| bad("tier"))?,
        hourly_limit: u32::try_from(num("hourly_limit")?).map_err(|_| bad("hourly_limit"))?,
        owner: f.get("owner").filter(|s| !s.is_empty()).cloned(),
        note: f.get("note").cloned(),
        created_ms: num("created_ms")?,
        revoked_ms: f
            .contains_key("revoked_ms")
            .then(|| num("revoked_ms"))
            .transpose()?,
    })
}

fn json<T: serde::de::DeserializeOwned>(
    op: &'static str,
    key: &str,
    b: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(b).map_err(|e| err(op, format!("{key}: {e}")))
}

impl Inner {
    /// Every key matching `pattern`: SCAN on a standalone server (never blocks it); KEYS on a
    /// cluster, which the client sends to every primary and combines (admin listings only).
    pub(super) async fn matching(&self, pattern: &str) -> Result<Vec<String>, StoreError> {
        let mut c = self.conn("scan")?;
        if self.topology() == Topology::Cluster {
            return check(
                "keys",
                redis::cmd("KEYS").arg(pattern).query_async(&mut c).await,
            );
        }
        let mut cursor = 0u64;
        let mut out = Vec::new();
        loop {
            let (next, keys): (u64, Vec<String>) = check(
                "scan",
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(500)
                    .query_async(&mut c)
                    .await,
            )?;
            out.extend(keys);
            if next == 0 {
                return Ok(out);
            }
            cursor = next;
        }
    }

    pub(super) async fn usage(&self, id: IdKey, now_ms: u64) -> Result<Option<Usage>, StoreError> {
        // Plain reads (admin views need no atomicity); all keys share one slot, so one
        // pipeline works on a cluster too.
        let keys = self.layout.windows(&id, now_ms);
        let fixed: Vec<WindowKind> = WindowKind::ALL
            .into_iter()
            .filter(|k| k.spec().shape == Shape::Fixed)
            .collect();
        let sliding: Vec<WindowKind> = WindowKind::ALL
            .into_iter()
            .filter(|k| k.spec().shape == Shape::Sliding)
            .collect();
        let mut pipe = redis::pipe();
        for k in &sliding {
            pipe.cmd("HGETALL").arg(&keys[*k]);
        }
        let names: Vec<&String> = fixed.iter().map(|&k| &keys[k]).collect();
        pipe.cmd("MGET").arg(&names);
        pipe.cmd("GET").arg(self.layout.first_seen(&id));
        let mut c = self.conn("usage")?;
        let mut replies: Vec<Value> = check("usage", pipe.query_async(&mut c).await)?;
        let ts: Option<String> = replies.pop().and_then(|v| redis::from_redis_value(v).ok());
        let counts: Vec<Option<u32>> = replies
            .pop()
            .and_then(|v| redis::from_redis_value(v).ok())
            .unwrap_or_default();
        let mut slots = PerWindow::<RingSlots>::default();
        for (k, v) in sliding.iter().zip(replies) {
            slots[*k] = redis::from_redis_value(v).unwrap_or_default();
        }
        let mut u = Usage {
            used: PerWindow::default(),
            reset_ms: PerWindow::from_fn(|k| windows::until_rollover(now_ms, k.spec().span_ms)),
        };
        let today = iso8601(now_ms);
        for (k, n) in fixed.iter().zip(counts) {
            // The daily count is yesterday's until the next count starts it over.
            let stale = *k == WindowKind::Daily
                && ts
                    .as_deref()
                    .is_some_and(|t| t.get(..10) != today.get(..10));
            u.used[*k] = if stale { 0 } else { n.unwrap_or(0) };
        }
        let slot = now_ms / windows::BURST_SLOT_MS;
        let span = windows::BURST_SLOTS as u64 - 1;
        for k in sliding {
            let mut oldest = None;
            for &(s, c) in &slots[k] {
                if s + span >= slot && s <= slot {
                    u.used[k] = u.used[k].saturating_add(c);
                    oldest = Some(oldest.map_or(s, |o: u64| o.min(s)));
                }
            }
            u.reset_ms[k] = oldest.map_or(k.spec().span_ms, |o| {
                ((o + windows::BURST_SLOTS as u64) * windows::BURST_SLOT_MS)
                    .saturating_sub(now_ms)
                    .max(1)
            });
        }
        let empty = u.used.0.iter().all(|&n| n == 0);
        Ok((!empty).then_some(u))
    }

    pub(super) async fn put_key(&self, record: KeyRecord) -> Result<(), StoreError> {
        let key = self.layout.key_record(&record.id);
        let fields = key_fields(&record)?;
        let mut c = self.conn("put_key")?;
        // One transaction on one key: a reader never sees half a record (or old fields left).
        check(
            "put_key",
            redis::pipe()
                .atomic()
                .cmd("DEL")
                .arg(&key)
                .ignore()
                .cmd("HSET")
                .arg(&key)
                .arg(&fields)
                .ignore()
                .exec_async(&mut c)
                .await,
        )
    }

    /// The key record at `key`: absent, read, or unreadable.
    pub(super) async fn key_at(
        &self,
        key: &str,
    ) -> Result<Result<Option<KeyRecord>, UnreadableRecord>, StoreError> {
        let mut c = self.conn("key")?;
        let got: redis::RedisResult<HashMap<String, String>> =
            redis::cmd("HGETALL").arg(key).query_async(&mut c).await;
        let read = match got {
            Ok(f) if f.is_empty() => Ok(None),
            Ok(f) => key_from_fields(key, &f)
                .map(Some)
                .map_err(|e| UnreadableRecord {
                    kind: RecordKind::Key,
                    key: key.to_string(),
                    field: None,
                    id: None,
                    error: e.to_string(),
                }),
            // Written as a JSON string before keys were hashes.
            Err(e) if e.code() == Some("WRONGTYPE") => self.get_raw("key", key).await?,
            Err(e) => return Err(err("key", e.to_string())),
        };
        let id = key.strip_prefix(&self.layout.name("key:"));
        Ok(read.map_err(|r| UnreadableRecord {
            id: id.map(str::to_string),
            ..r
        }))
    }

    /// An unreadable key record reads as none: its key does not authenticate.
    pub(super) async fn key(&self, id: &str) -> Result<Option<KeyRecord>, StoreError> {
        Ok(self
            .key_at(&self.layout.key_record(id))
            .await?
            .unwrap_or_else(|r| {
                self.unreadable.found(&r);
                None
            }))
    }

    /// Every key record, read one by one: those that read, and those that do not.
    pub(super) async fn keys_read(
        &self,
    ) -> Result<(Vec<KeyRecord>, Vec<UnreadableRecord>), StoreError> {
        let (mut v, mut bad) = (Vec::new(), Vec::new());
        for k in self.matching(&self.layout.name("key:*")).await? {
            match self.key_at(&k).await? {
                Ok(Some(r)) => v.push(r),
                Ok(None) => {}
                Err(r) => bad.push(r),
            }
        }
        v.sort_by(|a, b| a.id.cmp(&b.id));
        bad.sort_by(|a, b| a.key.cmp(&b.key));
        Ok((v, bad))
    }

    pub(super) async fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        let (v, bad) = self.keys_read().await?;
        bad.iter().for_each(|r| self.unreadable.found(r));
        Ok(v)
    }

    pub(super) async fn strikes(&self, ip: IpAddr) -> Result<Option<StrikeRecord>, StoreError> {
        self.get_json("strikes", &self.layout.strikes(&self.hasher.ip_id(ip)))
            .await
    }

    /// Writes `lockout` (unless a longer one is there) and `strikes` (unless more are there)
    /// atomically, then appends the lockout now in force to the stream. Returns it.
    pub(super) async fn put_lockout(
        &self,
        lockout: &Lockout,
        strikes: Option<&StrikeRecord>,
        host: &str,
    ) -> Result<Lockout, StoreError> {
        let op = "put_lockout";
        let id = self.hasher.ip_id(lockout.ip);
        let body = serde_json::to_string(lockout).map_err(|e| err(op, e.to_string()))?;
        let strikes_body = strikes
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| err(op, e.to_string()))?
            .unwrap_or_default();
        let strikes_ttl = strikes.map_or(1, |s| {
            s.quiet_from_ms.saturating_sub(lockout.since_ms) + STRIKE_TTL_MS
        });
        let mut c = self.conn(op)?;
        let (_won, now): (i64, String) = check(
            op,
            self.lockout_script
                .key(self.layout.lockout(&id))
                .key(self.layout.strikes(&id))
                .arg(&body)
                .arg(lockout.until_ms)
                .arg(lockout.until_ms.saturating_sub(lockout.since_ms).max(1))
                .arg(&strikes_body)
                .arg(strikes_ttl)
                .invoke_async(&mut c)
                .await,
        )?;
        let in_force: Lockout = json(op, "lockout", now.as_bytes())?;
        self.publish(&LockoutEvent::Locked {
            lockout: in_force.clone(),
            strikes: strikes.copied(),
            host: host.to_string(),
        })
        .await?;
        Ok(in_force)
    }

    pub(super) async fn lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        self.get_json("lockout", &self.layout.lockout(&self.hasher.ip_id(ip)))
            .await
    }

    /// Deletes `ip`'s lockout and appends the lift to the stream (also when there was none:
    /// another host's replica may still hold it).
    pub(super) async fn remove_lockout(
        &self,
        ip: IpAddr,
        host: &str,
    ) -> Result<Option<Lockout>, StoreError> {
        let key = self.layout.lockout(&self.hasher.ip_id(ip));
        let mut c = self.conn("remove_lockout")?;
        let body: Option<Vec<u8>> = check(
            "remove_lockout",
            redis::cmd("GETDEL").arg(&key).query_async(&mut c).await,
        )?;
        let was = body.and_then(|b| {
            parse(RecordKind::Lockout, &key, None, &b, check_lockout)
                .map_err(|r| self.unreadable.forget(&r))
                .ok()
        });
        self.publish(&LockoutEvent::Lifted {
            ip,
            host: host.to_string(),
            forget_strikes: false,
        })
        .await?;
        Ok(was)
    }

    /// Deletes `ip`'s strike record and appends a lift that forgets strikes to the stream (also
    /// when there was none here: another host's replica may still hold one).
    pub(super) async fn forget_strikes(&self, ip: IpAddr, host: &str) -> Result<bool, StoreError> {
        let key = self.layout.strikes(&self.hasher.ip_id(ip));
        let mut c = self.conn("forget_strikes")?;
        let deleted: i64 = check(
            "forget_strikes",
            redis::cmd("DEL").arg(&key).query_async(&mut c).await,
        )?;
        self.publish(&LockoutEvent::Lifted {
            ip,
            host: host.to_string(),
            forget_strikes: true,
        })
        .await?;
        Ok(deleted > 0)
    }

    /// Every lockout Valkey holds (each key expires with its lockout), with its strikes: those
    /// that read, and those that do not.
    pub(super) async fn lockouts_read(
        &self,
    ) -> Result<(Vec<(Lockout, Option<StrikeRecord>)>, Vec<UnreadableRecord>), StoreError> {
        let (mut v, mut bad) = (Vec::new(), Vec::new());
        for k in self.matching(&self.layout.name("lockout:*")).await? {
            match self.get_raw::<Lockout>("lockouts", &k).await? {
                Ok(Some(l)) => {
                    let s = self.strikes(l.ip).await?;
                    v.push((l, s));
                }
                Ok(None) => {}
                Err(r) => bad.push(r),
            }
        }
        v.sort_by_key(|(l, _)| (l.since_ms, l.ip));
        bad.sort_by(|a, b| a.key.cmp(&b.key));
        Ok((v, bad))
    }

    /// Every lockout that reads (one that does not is noted and skipped).
    pub(super) async fn active_lockouts(
        &self,
    ) -> Result<Vec<(Lockout, Option<StrikeRecord>)>, StoreError> {
        let (v, bad) = self.lockouts_read().await?;
        bad.iter().for_each(|r| self.unreadable.found(r));
        Ok(v)
    }

    /// A list's entries read one by one: those that read, and those that do not.
    pub(super) async fn list_read(
        &self,
        kind: ListKind,
    ) -> Result<(Vec<ListEntry>, Vec<UnreadableRecord>), StoreError> {
        let key = self.layout.list(kind);
        let mut c = self.conn("list")?;
        let flat: Vec<(String, Vec<u8>)> = check(
            "list",
            redis::cmd("HGETALL").arg(&key).query_async(&mut c).await,
        )?;
        let (mut v, mut bad) = (Vec::new(), Vec::new());
        for (field, b) in &flat {
            match parse(
                RecordKind::List(kind),
                &key,
                Some(field),
                b,
                check_list_entry,
            ) {
                Ok(e) => v.push(e),
                Err(r) => bad.push(r),
            }
        }
        bad.sort_by(|a, b| a.field.cmp(&b.field));
        Ok((v, bad))
    }

    /// A list's entries that read (one that does not is noted and skipped).
    pub(super) async fn list(&self, kind: ListKind) -> Result<Vec<ListEntry>, StoreError> {
        let (v, bad) = self.list_read(kind).await?;
        bad.iter().for_each(|r| self.unreadable.found(r));
        Ok(v)
    }

    pub(super) async fn put_list_entry(
        &self,
        kind: ListKind,
        entry: ListEntry,
    ) -> Result<(), StoreError> {
        let key = self.layout.list(kind);
        let body = serde_json::to_vec(&entry).map_err(|e| err("put_list_entry", e.to_string()))?;
        let mut c = self.conn("put_list_entry")?;
        check(
            "put_list_entry",
            redis::cmd("HSET")
                .arg(&key)
                .arg(entry.net.to_string())
                .arg(&body)
                .exec_async(&mut c)
                .await,
        )
    }

    pub(super) async fn remove_list_entry(
        &self,
        kind: ListKind,
        net: IpNet,
    ) -> Result<bool, StoreError> {
        let key = self.layout.list(kind);
        let mut c = self.conn("remove_list_entry")?;
        let n: i64 = check(
            "remove_list_entry",
            redis::cmd("HDEL")
                .arg(&key)
                .arg(net.to_string())
                .query_async(&mut c)
                .await,
        )?;
        Ok(n == 1)
    }
}
