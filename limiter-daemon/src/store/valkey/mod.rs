//! A Valkey store: the same [`Store`] semantics with counters in a Valkey server, so a fleet
//! shares budgets. One script call per decision checks and counts every window of one identity
//! atomically ([`check_and_count.lua`](check_and_count.lua), the same rules as
//! [`crate::store::count::apply`]); each identity's keys share a hash tag
//! (`<prefix>quota:{ip:<hash>}…`) so they sit in one cluster slot. Keys, strikes, lockouts and
//! lists are JSON values under the same prefix. The hashing secret, when none is configured, is
//! generated once and kept in the server (`SET NX`), shared by every host.
//!
//! Scope of this backend: a standalone server (no cluster redirects), no fallback when the
//! server is down (operations fail; the engine then allows and logs), and the lockout check is
//! a second round trip.

pub mod resp;

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use parking_lot::Mutex;

use self::resp::{Conn, Reply};
use super::count::{CountOutcome, CountRequest, Refusals, Usage, WindowUse};
use super::records::{KeyRecord, ListEntry, ListKind, Lockout, StrikeRecord};
use super::windows::{self, DAY_MS, HOUR_MS};
use super::{Store, StoreError};
use crate::identity::hash::{IdKey, IdentityHasher};
use crate::identity::key_cache::KeyLookup;

const SCRIPT: &str = include_str!("check_and_count.lua");
const POOL: usize = 8;
const STRIKE_TTL_MS: u64 = 7 * 86_400_000;

pub struct ValkeyStore {
    address: String,
    prefix: String,
    timeout: Duration,
    pool: Vec<Mutex<Option<Conn>>>,
    script_sha: String,
    hasher: IdentityHasher,
}

fn err(op: &'static str, message: impl Into<String>) -> StoreError {
    StoreError::Valkey {
        op,
        message: message.into(),
    }
}

impl ValkeyStore {
    /// Connects to `address` (`host:port`), loads the script, and settles the hashing secret.
    pub fn open(
        address: &str,
        prefix: &str,
        hash: crate::config::HashMode,
        hash_secret: Option<&[u8]>,
    ) -> Result<Self, StoreError> {
        let mut store = ValkeyStore {
            address: address.to_string(),
            prefix: prefix.to_string(),
            timeout: Duration::from_secs(2),
            pool: (0..POOL).map(|_| Mutex::new(None)).collect(),
            script_sha: String::new(),
            hasher: IdentityHasher::Sha256,
        };
        let sha = store.call(0, "script load", &[b"SCRIPT", b"LOAD", SCRIPT.as_bytes()])?;
        store.script_sha = String::from_utf8_lossy(sha.as_bytes().unwrap_or_default()).into_owned();
        store.hasher = match (hash, hash_secret) {
            (crate::config::HashMode::Sha256, _) => IdentityHasher::Sha256,
            (crate::config::HashMode::Hmac, Some(s)) => IdentityHasher::hmac(s),
            (crate::config::HashMode::Hmac, None) => {
                let key = store.name("hash-secret");
                let fresh = hex::encode(rand::random::<[u8; 32]>());
                store.call(
                    0,
                    "secret",
                    &[b"SET", key.as_bytes(), fresh.as_bytes(), b"NX"],
                )?;
                let got = store.call(0, "secret", &[b"GET", key.as_bytes()])?;
                let bytes = got
                    .as_bytes()
                    .and_then(|b| hex::decode(b).ok())
                    .filter(|b| b.len() >= 16)
                    .ok_or_else(|| err("secret", "stored hash secret is not hex of 16+ bytes"))?;
                IdentityHasher::hmac(&bytes)
            }
        };
        Ok(store)
    }

    fn name(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    /// One command on pooled connection `slot`, reconnecting once if the connection broke.
    fn call(&self, slot: usize, op: &'static str, args: &[&[u8]]) -> Result<Reply, StoreError> {
        let mut conn = self.pool[slot % POOL].lock();
        for attempt in 0..2 {
            if conn.is_none() {
                *conn = Some(
                    Conn::connect(&self.address, self.timeout)
                        .map_err(|e| err(op, format!("connect {}: {e}", self.address)))?,
                );
            }
            let Some(c) = conn.as_mut() else { continue };
            match c.call(args) {
                Ok(Reply::Error(e)) => return Err(err(op, e)),
                Ok(r) => return Ok(r),
                Err(e) if attempt == 0 => {
                    tracing::warn!(error = %e, "valkey connection broke; reconnecting");
                    *conn = None;
                }
                Err(e) => return Err(err(op, e.to_string())),
            }
        }
        Err(err(op, "no connection"))
    }

    fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        op: &'static str,
        key: &str,
    ) -> Result<Option<T>, StoreError> {
        match self.call(0, op, &[b"GET", key.as_bytes()])? {
            Reply::Nil => Ok(None),
            r => {
                let b = r.as_bytes().ok_or_else(|| err(op, "unexpected reply"))?;
                serde_json::from_slice(b)
                    .map(Some)
                    .map_err(|e| err(op, format!("{key}: {e}")))
            }
        }
    }

    fn set_json<T: serde::Serialize>(
        &self,
        op: &'static str,
        key: &str,
        value: &T,
        ttl_ms: Option<u64>,
    ) -> Result<(), StoreError> {
        let body = serde_json::to_vec(value).map_err(|e| err(op, e.to_string()))?;
        match ttl_ms {
            Some(ms) => {
                let ms = ms.max(1).to_string();
                self.call(
                    0,
                    op,
                    &[b"SET", key.as_bytes(), &body, b"PX", ms.as_bytes()],
                )?
            }
            None => self.call(0, op, &[b"SET", key.as_bytes(), &body])?,
        };
        Ok(())
    }

    /// Every key matching `pattern` (SCAN, so the server is never blocked).
    fn scan(&self, pattern: &str) -> Result<Vec<String>, StoreError> {
        let mut cursor = "0".to_string();
        let mut out = Vec::new();
        loop {
            let r = self.call(
                0,
                "scan",
                &[
                    b"SCAN",
                    cursor.as_bytes(),
                    b"MATCH",
                    pattern.as_bytes(),
                    b"COUNT",
                    b"500",
                ],
            )?;
            let Reply::Array(parts) = r else {
                return Err(err("scan", "unexpected reply"));
            };
            let (Some(next), Some(Reply::Array(keys))) = (parts.first(), parts.get(1)) else {
                return Err(err("scan", "unexpected reply"));
            };
            cursor = String::from_utf8_lossy(next.as_bytes().unwrap_or(b"0")).into_owned();
            out.extend(keys.iter().filter_map(|k| {
                k.as_bytes()
                    .map(|b| String::from_utf8_lossy(b).into_owned())
            }));
            if cursor == "0" {
                return Ok(out);
            }
        }
    }

    /// `<prefix>quota:{ip:<hex>}`: the identity's hash tag.
    fn quota_key(&self, id: &IdKey) -> String {
        let ns = match id.namespace_byte() {
            1 => "ip",
            2 => "tid",
            3 => "key",
            _ => "compat",
        };
        format!("{}quota:{{{ns}:{}}}", self.prefix, hex::encode(&id.0[1..]))
    }

    fn window_keys(&self, id: &IdKey, now_ms: u64) -> [String; 4] {
        let base = self.quota_key(id);
        let h = windows::hour_index(now_ms);
        let d = windows::day_index(now_ms);
        [
            format!("{base}:burst"),
            format!("{base}:h:{h}"),
            format!("{base}:kh:{h}"),
            format!("{base}:d:{d}"),
        ]
    }
}

fn int(r: &Reply, i: usize) -> u64 {
    match r {
        Reply::Array(v) => v
            .get(i)
            .and_then(Reply::as_int)
            .map_or(0, |x| u64::try_from(x).unwrap_or(0)),
        _ => 0,
    }
}

fn clamp(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl KeyLookup for ValkeyStore {
    fn lookup_key(&self, id: &str) -> Result<Option<KeyRecord>, StoreError> {
        Store::key(self, id)
    }
}

impl Store for ValkeyStore {
    fn hasher(&self) -> IdentityHasher {
        self.hasher.clone()
    }

    fn check_and_count(&self, req: &CountRequest) -> Result<CountOutcome, StoreError> {
        let keys = self.window_keys(&req.id, req.now_ms);
        let n = |v: Option<u32>| v.unwrap_or(0).to_string();
        let now = req.now_ms.to_string();
        let cost = req.cost.to_string();
        let (bl, hl, kl) = (n(req.burst), n(req.hourly), n(req.key_hourly));
        let dl = n(req.daily.map(|d| d.limit));
        let de = if req.daily.is_some_and(|d| d.enforce) {
            "1"
        } else {
            "0"
        };
        let args: [&[u8]; 14] = [
            b"EVALSHA",
            self.script_sha.as_bytes(),
            b"4",
            keys[0].as_bytes(),
            keys[1].as_bytes(),
            keys[2].as_bytes(),
            keys[3].as_bytes(),
            now.as_bytes(),
            cost.as_bytes(),
            bl.as_bytes(),
            hl.as_bytes(),
            kl.as_bytes(),
            dl.as_bytes(),
            de.as_bytes(),
        ];
        let slot = (req.id.as_u64() % POOL as u64) as usize;
        let r = match self.call(slot, "check_and_count", &args) {
            Err(StoreError::Valkey { message, .. }) if message.starts_with("NOSCRIPT") => {
                let mut eval = args;
                eval[0] = b"EVAL";
                eval[1] = SCRIPT.as_bytes();
                self.call(slot, "check_and_count", &eval)?
            }
            other => other?,
        };
        let flags = int(&r, 1);
        let refused = Refusals {
            burst: flags & 1 != 0,
            hourly: flags & 2 != 0,
            key_hourly: flags & 4 != 0,
            daily: flags & 8 != 0,
        };
        let hour_left = windows::until_rollover(req.now_ms, HOUR_MS);
        let day_left = windows::until_rollover(req.now_ms, DAY_MS);
        let w = |limit: Option<u32>, used: u64, reset_ms: u64| {
            limit.map(|limit| WindowUse {
                limit,
                used: clamp(used),
                reset_ms,
            })
        };
        Ok(CountOutcome {
            admitted: int(&r, 0) == 1,
            refused,
            burst: w(req.burst, int(&r, 2), int(&r, 3)),
            hourly: w(req.hourly, int(&r, 4), hour_left),
            key_hourly: w(req.key_hourly, int(&r, 5), hour_left),
            daily: w(req.daily.map(|d| d.limit), int(&r, 6), day_left),
        })
    }

    fn usage(&self, id: &IdKey, now_ms: u64) -> Result<Option<Usage>, StoreError> {
        // Plain reads (admin views need no atomicity).
        let keys = self.window_keys(id, now_ms);
        let mut burst = 0;
        let mut reset = windows::BURST_SPAN_MS;
        if let Reply::Array(flat) = self.call(0, "usage", &[b"HGETALL", keys[0].as_bytes()])? {
            let slot = now_ms / windows::BURST_SLOT_MS;
            let mut oldest = None;
            for pair in flat.chunks(2) {
                let (Some(s), Some(c)) = (pair[0].as_int(), pair.get(1).and_then(Reply::as_int))
                else {
                    continue;
                };
                let s = u64::try_from(s).unwrap_or(0);
                if s + 12 >= slot && s <= slot {
                    burst += u32::try_from(c).unwrap_or(0);
                    oldest = Some(oldest.map_or(s, |o: u64| o.min(s)));
                }
            }
            if let Some(o) = oldest {
                reset = ((o + 13) * windows::BURST_SLOT_MS)
                    .saturating_sub(now_ms)
                    .max(1);
            }
        }
        let get = |k: &str| -> Result<u32, StoreError> {
            Ok(clamp(
                self.call(0, "usage", &[b"GET", k.as_bytes()])?
                    .as_int()
                    .map_or(0, |v| u64::try_from(v).unwrap_or(0)),
            ))
        };
        let u = Usage {
            burst,
            burst_reset_ms: reset,
            hourly: get(&keys[1])?,
            key_hourly: get(&keys[2])?,
            daily: get(&keys[3])?,
        };
        let empty = u.burst == 0 && u.hourly == 0 && u.key_hourly == 0 && u.daily == 0;
        Ok((!empty).then_some(u))
    }

    fn identity_count(&self) -> usize {
        // Counting would need a keyspace scan; the server's own INFO keyspace says it better.
        0
    }

    fn put_key(&self, record: KeyRecord) -> Result<(), StoreError> {
        self.set_json(
            "put_key",
            &self.name(&format!("key:{}", record.id)),
            &record,
            None,
        )
    }

    fn key(&self, id: &str) -> Result<Option<KeyRecord>, StoreError> {
        self.get_json("key", &self.name(&format!("key:{id}")))
    }

    fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        let mut v = Vec::new();
        for k in self.scan(&self.name("key:*"))? {
            if let Some(r) = self.get_json::<KeyRecord>("keys", &k)? {
                v.push(r);
            }
        }
        v.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(v)
    }

    fn strikes(&self, ip: IpAddr) -> Result<Option<StrikeRecord>, StoreError> {
        self.get_json("strikes", &self.name(&format!("strikes:{ip}")))
    }

    fn put_lockout(
        &self,
        lockout: Lockout,
        strikes: Option<StrikeRecord>,
    ) -> Result<(), StoreError> {
        let ttl = lockout.until_ms.saturating_sub(lockout.since_ms);
        self.set_json(
            "put_lockout",
            &self.name(&format!("lockout:{}", lockout.ip)),
            &lockout,
            Some(ttl),
        )?;
        if let Some(s) = strikes {
            self.set_json(
                "put_lockout",
                &self.name(&format!("strikes:{}", lockout.ip)),
                &s,
                Some(s.quiet_from_ms.saturating_sub(lockout.since_ms) + STRIKE_TTL_MS),
            )?;
        }
        Ok(())
    }

    fn lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        self.get_json("lockout", &self.name(&format!("lockout:{ip}")))
    }

    fn remove_lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        let l = self.lockout(ip)?;
        self.call(
            0,
            "remove_lockout",
            &[b"DEL", self.name(&format!("lockout:{ip}")).as_bytes()],
        )?;
        Ok(l)
    }

    fn lockouts(&self, now_ms: u64) -> Result<Vec<Lockout>, StoreError> {
        let mut v = Vec::new();
        for k in self.scan(&self.name("lockout:*"))? {
            if let Some(l) = self.get_json::<Lockout>("lockouts", &k)? {
                if l.is_active(now_ms) {
                    v.push(l);
                }
            }
        }
        v.sort_by_key(|l| (l.since_ms, l.ip));
        Ok(v)
    }

    fn list(&self, kind: ListKind) -> Result<Vec<ListEntry>, StoreError> {
        let key = self.name(&format!("list:{kind:?}").to_lowercase());
        let Reply::Array(flat) = self.call(0, "list", &[b"HGETALL", key.as_bytes()])? else {
            return Ok(Vec::new());
        };
        let mut v = Vec::new();
        for pair in flat.chunks(2) {
            if let Some(b) = pair.get(1).and_then(Reply::as_bytes) {
                v.push(serde_json::from_slice(b).map_err(|e| err("list", e.to_string()))?);
            }
        }
        Ok(v)
    }

    fn put_list_entry(&self, kind: ListKind, entry: ListEntry) -> Result<(), StoreError> {
        let key = self.name(&format!("list:{kind:?}").to_lowercase());
        let body = serde_json::to_vec(&entry).map_err(|e| err("put_list_entry", e.to_string()))?;
        let field = entry.net.to_string();
        self.call(
            0,
            "put_list_entry",
            &[b"HSET", key.as_bytes(), field.as_bytes(), &body],
        )?;
        Ok(())
    }

    fn remove_list_entry(&self, kind: ListKind, net: &IpNet) -> Result<bool, StoreError> {
        let key = self.name(&format!("list:{kind:?}").to_lowercase());
        let field = net.to_string();
        let r = self.call(
            0,
            "remove_list_entry",
            &[b"HDEL", key.as_bytes(), field.as_bytes()],
        )?;
        Ok(r.as_int() == Some(1))
    }
}
