//! A Valkey store: the same [`Store`] semantics with counters in Valkey (standalone or Valkey
//! Cluster, detected when the store opens), so a fleet shares budgets. Talks to the server
//! through the `redis` crate ([`pool`]).
//!
//! One round trip per counted decision: [`check_and_count.lua`](check_and_count.lua) reads the
//! caller's lockout and, when none is active, checks and counts every window of one identity
//! atomically (the same rules as [`crate::store::count::apply`]), with one key and one set of
//! arguments per row of the window table ([`crate::model::WINDOWS`]). Each identity's keys share a
//! hash tag (`<prefix>quota:{ip:<hash>}…`), and an IP's lockout and strikes carry the same tag
//! as that IP's counters (`<prefix>lockout:{ip:<hash>}`), so the script touches one cluster
//! slot. API keys and lists are JSON values under the same prefix. The hashing secret, when none
//! is configured, is generated once and kept in the server (`SET NX`), shared by every host.
//!
//! What this backend does not do itself: fall back when the server is down (the engine wraps
//! it in [`crate::store::fallback::FallbackStore`]).

pub mod pool;

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use redis::{ConnectionLike, RedisError, Value};

use self::pool::{err, Pool, Topology};
use super::count::{CountOutcome, CountRequest, Usage, WindowUse};
use super::error::StoreError;
use super::gate::Gate;
use super::traits::{CountStore, RecordStore};
use super::windows;
use crate::identity::hash::{IdKey, IdentityHasher, Namespace};
use crate::model::{
    Counts, KeyRecord, ListEntry, ListKind, Lockout, PerWindow, Shape, StrikeRecord, WindowKind,
};

const SCRIPT: &str = include_str!("check_and_count.lua");
const STRIKE_TTL_MS: u64 = 7 * 86_400_000;
/// Connect, read and write timeout: a dead server fails the call (and the fallback store
/// counts locally) instead of hanging the request.
const TIMEOUT: Duration = Duration::from_secs(2);
/// The script's first reply element when the caller is locked out (0/1 = refused/admitted).
const LOCKED: i64 = 2;

pub struct ValkeyStore {
    pool: Pool,
    prefix: String,
    script: redis::Script,
    hasher: IdentityHasher,
}

impl ValkeyStore {
    /// Connects to `address` (`host:port`; a cluster node's address for a cluster), loads the
    /// script, and settles the hashing secret.
    pub fn open(
        address: &str,
        prefix: &str,
        hash: crate::config::HashMode,
        hash_secret: Option<&[u8]>,
    ) -> Result<Self, StoreError> {
        let mut store = ValkeyStore {
            pool: Pool::open(address, TIMEOUT)?,
            prefix: prefix.to_string(),
            script: redis::Script::new(SCRIPT),
            hasher: IdentityHasher::sha256(),
        };
        // Loaded up front so the first decision does not pay for NOSCRIPT; `invoke` reloads it
        // by itself if the server forgot it (restart, SCRIPT FLUSH).
        store
            .pool
            .with(0, "script load", |c| store.script.prepare_invoke().load(c))?;
        store.hasher = match (hash, hash_secret) {
            (crate::config::HashMode::Sha256, _) => IdentityHasher::sha256(),
            (crate::config::HashMode::Hmac, Some(s)) => IdentityHasher::hmac(s),
            (crate::config::HashMode::Hmac, None) => {
                let key = store.name("hash-secret");
                let fresh = hex::encode(rand::random::<[u8; 32]>());
                let got: String = store.pool.with(0, "secret", |c| {
                    redis::cmd("SET").arg(&key).arg(&fresh).arg("NX").exec(c)?;
                    redis::cmd("GET").arg(&key).query(c)
                })?;
                let bytes = hex::decode(got.trim())
                    .ok()
                    .filter(|b| b.len() >= 16)
                    .ok_or_else(|| err("secret", "stored hash secret is not hex of 16+ bytes"))?;
                IdentityHasher::hmac(&bytes)
            }
        };
        Ok(store)
    }

    /// Standalone server or cluster.
    pub fn topology(&self) -> Topology {
        self.pool.topology()
    }

    fn name(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        op: &'static str,
        key: &str,
    ) -> Result<Option<T>, StoreError> {
        let body: Option<Vec<u8>> = self
            .pool
            .with(0, op, |c| redis::cmd("GET").arg(key).query(c))?;
        body.map(|b| serde_json::from_slice(&b).map_err(|e| err(op, format!("{key}: {e}"))))
            .transpose()
    }

    fn set_json<T: serde::Serialize>(
        &self,
        op: &'static str,
        key: &str,
        value: &T,
        ttl_ms: Option<u64>,
    ) -> Result<(), StoreError> {
        let body = serde_json::to_vec(value).map_err(|e| err(op, e.to_string()))?;
        self.pool.with(0, op, |c| {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(&body);
            if let Some(ms) = ttl_ms {
                cmd.arg("PX").arg(ms.max(1));
            }
            cmd.exec(c)
        })
    }

    /// Every key matching `pattern`: SCAN on a standalone server (never blocks it); KEYS on a
    /// cluster, which the client sends to every primary and combines (admin listings only).
    fn matching(&self, pattern: &str) -> Result<Vec<String>, StoreError> {
        if self.topology() == Topology::Cluster {
            return self
                .pool
                .with(0, "keys", |c| redis::cmd("KEYS").arg(pattern).query(c));
        }
        self.pool.with(0, "scan", |c| {
            let mut cursor = 0u64;
            let mut out = Vec::new();
            loop {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(500)
                    .query(c)?;
                out.extend(keys);
                if next == 0 {
                    return Ok(out);
                }
                cursor = next;
            }
        })
    }

    /// `{ip:<hex>}`: the identity's hash tag, so all its keys share one cluster slot.
    fn tag(id: &IdKey) -> String {
        let ns = match id.namespace_byte() {
            1 => "ip",
            2 => "tid",
            3 => "key",
            _ => "compat",
        };
        format!("{{{ns}:{}}}", hex::encode(&id.0[1..]))
    }

    /// `<prefix>quota:{ip:<hex>}`.
    fn quota_key(&self, id: &IdKey) -> String {
        format!("{}quota:{}", self.prefix, Self::tag(id))
    }

    /// The identity `ip` is counted as when it is the subject (same bytes as the engine hashes).
    fn ip_id(&self, ip: IpAddr) -> IdKey {
        self.hasher.id(Namespace::Ip, ip.to_string().as_bytes())
    }

    /// `<prefix>lockout:{ip:<hex>}`: beside the IP's counters, in the same slot.
    fn lockout_key(&self, ip: IpAddr) -> String {
        format!("{}lockout:{}", self.prefix, Self::tag(&self.ip_id(ip)))
    }

    fn strikes_key(&self, ip: IpAddr) -> String {
        format!("{}strikes:{}", self.prefix, Self::tag(&self.ip_id(ip)))
    }

    /// One key per window: `<quota key>:burst` (sliding), `<quota key>:h:<hour index>` (fixed).
    fn window_keys(&self, id: &IdKey, now_ms: u64) -> PerWindow<String> {
        let base = self.quota_key(id);
        PerWindow::from_fn(|k| {
            let spec = k.spec();
            match spec.shape {
                Shape::Sliding => format!("{base}:{}", spec.store_key),
                Shape::Fixed => format!(
                    "{base}:{}:{}",
                    spec.store_key,
                    windows::index(now_ms, spec.span_ms)
                ),
            }
        })
    }

    /// Runs the script for `req`, with `lockout` (a lockout key) checked first when given.
    fn run_script(
        &self,
        req: &CountRequest,
        lockout: Option<&str>,
    ) -> Result<Vec<Value>, StoreError> {
        let mut inv = self.script.prepare_invoke();
        for k in self.window_keys(&req.id, req.now_ms).0 {
            inv.key(k);
        }
        if let Some(k) = lockout {
            inv.key(k);
        }
        inv.arg(req.now_ms).arg(req.cost);
        for (kind, limit) in req.limits.iter() {
            let spec = kind.spec();
            inv.arg(limit.map_or(0, |l| l.max))
                .arg(u8::from(limit.is_some_and(|l| l.refuse)))
                .arg(u8::from(spec.counts == Counts::Requests))
                .arg(spec.span_ms)
                .arg(u8::from(spec.shape == Shape::Sliding))
                .arg(u8::from(spec.counts_refused));
        }
        let slot = usize::try_from(req.id.as_u64() % pool::POOL as u64).unwrap_or(0);
        self.pool
            .with(slot, "check_and_count", |c: &mut dyn ConnectionLike| {
                inv.invoke::<Vec<Value>>(c)
            })
    }

    /// The script's counting reply as the reference semantics' outcome.
    fn outcome(req: &CountRequest, r: &[Value]) -> CountOutcome {
        let flags = int(r, 1);
        CountOutcome {
            admitted: int(r, 0) == 1,
            refused: PerWindow::from_fn(|k| flags & (1 << k.index()) != 0),
            uses: req.limits.map(|k, limit| {
                limit.map(|l| WindowUse {
                    limit: l.max,
                    used: clamp(int(r, 2 + 2 * k.index())),
                    reset_ms: int(r, 3 + 2 * k.index()),
                })
            }),
        }
    }
}

/// A sliding window's hash as read: `(5 s slot number, count)`.
type RingSlots = Vec<(u64, u32)>;

/// Element `i` of a reply as a count (integers, or numbers the script sent as strings).
fn int(r: &[Value], i: usize) -> u64 {
    let v = match r.get(i) {
        Some(Value::Int(x)) => Some(*x),
        Some(Value::BulkString(b)) => std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()),
        _ => None,
    };
    v.map_or(0, |x| u64::try_from(x).unwrap_or(0))
}

fn clamp(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl CountStore for ValkeyStore {
    fn hasher(&self) -> IdentityHasher {
        self.hasher.clone()
    }

    fn check_and_count(&self, req: &CountRequest) -> Result<CountOutcome, StoreError> {
        let r = self.run_script(req, None)?;
        Ok(Self::outcome(req, &r))
    }

    fn gate_and_count(&self, ip: IpAddr, req: &CountRequest) -> Result<Gate, StoreError> {
        if self.topology() == Topology::Cluster && self.ip_id(ip) != req.id {
            // A key or token holder is counted under its own tag, in another slot than its
            // address's lockout: a cluster refuses one script over both, so ask in turn.
            if let Some(l) = self.lockout(ip)?.filter(|l| l.is_active(req.now_ms)) {
                return Ok(Gate::Locked(l));
            }
            return self.check_and_count(req).map(Gate::Counted);
        }
        let r = self.run_script(req, Some(&self.lockout_key(ip)))?;
        if r.first() == Some(&Value::Int(LOCKED)) {
            let Some(Value::BulkString(body)) = r.get(1) else {
                return Err(err("check_and_count", "locked reply without the lockout"));
            };
            let l: Lockout = serde_json::from_slice(body)
                .map_err(|e| err("check_and_count", format!("lockout of {ip}: {e}")))?;
            return Ok(Gate::Locked(l));
        }
        Ok(Gate::Counted(Self::outcome(req, &r)))
    }

    fn usage(&self, id: &IdKey, now_ms: u64) -> Result<Option<Usage>, StoreError> {
        // Plain reads (admin views need no atomicity); all keys share one slot, so MGET works
        // on a cluster too.
        let keys = self.window_keys(id, now_ms);
        let fixed: Vec<WindowKind> = WindowKind::ALL
            .into_iter()
            .filter(|k| k.spec().shape == Shape::Fixed)
            .collect();
        let (slots, counts): (PerWindow<RingSlots>, Vec<Option<u32>>) =
            self.pool.with(0, "usage", |c| {
                let mut slots = PerWindow::<RingSlots>::default();
                for (k, key) in keys.iter() {
                    if k.spec().shape == Shape::Sliding {
                        slots[k] = redis::cmd("HGETALL").arg(key).query(c)?;
                    }
                }
                let names: Vec<&String> = fixed.iter().map(|&k| &keys[k]).collect();
                let counts = redis::cmd("MGET").arg(&names).query(c)?;
                Ok::<_, RedisError>((slots, counts))
            })?;
        let mut u = Usage {
            used: PerWindow::default(),
            reset_ms: PerWindow::from_fn(|k| windows::until_rollover(now_ms, k.spec().span_ms)),
        };
        for (k, n) in fixed.iter().zip(counts) {
            u.used[*k] = n.unwrap_or(0);
        }
        let slot = now_ms / windows::BURST_SLOT_MS;
        let span = windows::BURST_SLOTS as u64 - 1;
        for (k, slots) in slots.iter() {
            if k.spec().shape != Shape::Sliding {
                continue;
            }
            let mut oldest = None;
            for &(s, c) in slots {
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

    fn identity_count(&self) -> usize {
        // Counting would need a keyspace scan; the server's own INFO keyspace says it better.
        0
    }
}

impl RecordStore for ValkeyStore {
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
        for k in self.matching(&self.name("key:*"))? {
            if let Some(r) = self.get_json::<KeyRecord>("keys", &k)? {
                v.push(r);
            }
        }
        v.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(v)
    }

    fn strikes(&self, ip: IpAddr) -> Result<Option<StrikeRecord>, StoreError> {
        self.get_json("strikes", &self.strikes_key(ip))
    }

    fn put_lockout(
        &self,
        lockout: Lockout,
        strikes: Option<StrikeRecord>,
    ) -> Result<(), StoreError> {
        let ttl = lockout.until_ms.saturating_sub(lockout.since_ms);
        self.set_json(
            "put_lockout",
            &self.lockout_key(lockout.ip),
            &lockout,
            Some(ttl),
        )?;
        if let Some(s) = strikes {
            self.set_json(
                "put_lockout",
                &self.strikes_key(lockout.ip),
                &s,
                Some(s.quiet_from_ms.saturating_sub(lockout.since_ms) + STRIKE_TTL_MS),
            )?;
        }
        Ok(())
    }

    fn lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        self.get_json("lockout", &self.lockout_key(ip))
    }

    fn remove_lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        let key = self.lockout_key(ip);
        let body: Option<Vec<u8>> = self.pool.with(0, "remove_lockout", |c| {
            redis::cmd("GETDEL").arg(&key).query(c)
        })?;
        body.map(|b| {
            serde_json::from_slice(&b).map_err(|e| err("remove_lockout", format!("{key}: {e}")))
        })
        .transpose()
    }

    fn lockouts(&self, now_ms: u64) -> Result<Vec<Lockout>, StoreError> {
        let mut v = Vec::new();
        for k in self.matching(&self.name("lockout:*"))? {
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
        let flat: Vec<(String, Vec<u8>)> = self
            .pool
            .with(0, "list", |c| redis::cmd("HGETALL").arg(&key).query(c))?;
        flat.iter()
            .map(|(_, b)| serde_json::from_slice(b).map_err(|e| err("list", e.to_string())))
            .collect()
    }

    fn put_list_entry(&self, kind: ListKind, entry: ListEntry) -> Result<(), StoreError> {
        let key = self.name(&format!("list:{kind:?}").to_lowercase());
        let body = serde_json::to_vec(&entry).map_err(|e| err("put_list_entry", e.to_string()))?;
        let field = entry.net.to_string();
        self.pool.with(0, "put_list_entry", |c| {
            redis::cmd("HSET").arg(&key).arg(&field).arg(&body).exec(c)
        })
    }

    fn remove_list_entry(&self, kind: ListKind, net: &IpNet) -> Result<bool, StoreError> {
        let key = self.name(&format!("list:{kind:?}").to_lowercase());
        let field = net.to_string();
        let n: i64 = self.pool.with(0, "remove_list_entry", |c| {
            redis::cmd("HDEL").arg(&key).arg(&field).query(c)
        })?;
        Ok(n == 1)
    }
}
