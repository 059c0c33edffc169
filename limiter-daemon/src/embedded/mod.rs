//! The embedded store (default; no server): counters in memory ([`counters`]) and snapshotted
//! into the state directory ([`snapshot`], written by [`snapshotter`] every
//! `store.snapshot_interval` and at shutdown), keys, strikes, lockouts and lists persisted there
//! on every change ([`persisted`]), identities hashed with a secret generated once into the
//! state directory unless one is configured.

pub mod counters;
pub mod persisted;
pub mod snapshot;
pub mod snapshotter;
pub mod table;

use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::Ordering;

use ipnet::IpNet;
use parking_lot::Mutex;
use std::path::PathBuf;

use self::counters::Counters;
use self::persisted::Persisted;
use crate::config::{HashMode, StoreSettings};
use crate::identity::hash::{IdKey, IdentityHasher};
use crate::model::{KeyRecord, ListEntry, ListKind, Lockout, StrikeRecord};
use crate::store::count::{CountOutcome, CountRequest, Usage};
use crate::store::error::{CorruptFile, StoreError};
use crate::store::gate::Gate;
use crate::store::state_file;
use crate::store::traits::{lockout_then_count, CountStore, RecordStore};

pub const SECRET_FILE: &str = "hash-secret";

/// Strike records quiet for longer than this are forgotten.
pub const STRIKE_RETENTION_MS: u64 = 7 * 86_400_000;

pub struct EmbeddedStore {
    counters: Counters,
    persisted: Persisted,
    hasher: IdentityHasher,
    corrupt: Vec<CorruptFile>,
    /// `None`: in memory only ([`EmbeddedStore::in_memory`]).
    dir: Option<PathBuf>,
    /// Serialises snapshot writes (the periodic one and the final one never interleave).
    snapshot_lock: Mutex<()>,
}

impl EmbeddedStore {
    /// Opens (creating if needed) the state directory. Corrupt files are set aside and reported
    /// by [`Store::corrupt_files`]; the store opens regardless.
    pub fn open(settings: &StoreSettings, now_ms: u64) -> Result<Self, StoreError> {
        let dir = &settings.state_dir;
        state_file::private_dir(dir)?;
        state_file::remove_stale_temps(dir);
        let mut persisted = Persisted::open(dir, now_ms)?;
        let mut corrupt = std::mem::take(&mut persisted.corrupt);
        let hasher = match settings.hash {
            HashMode::Sha256 => IdentityHasher::sha256(),
            HashMode::Hmac => match &settings.hash_secret {
                Some(secret) => IdentityHasher::hmac(secret),
                None => IdentityHasher::hmac(&load_or_create_secret(dir, now_ms, &mut corrupt)?),
            },
        };
        let counters = Counters::new(
            settings.max_identities,
            u64::try_from(settings.sweep_interval.as_millis()).unwrap_or(u64::MAX),
        );
        let (loaded, bad) = snapshot::load(dir, &counters, now_ms)?;
        corrupt.extend(bad);
        if loaded > 0 {
            tracing::info!(identities = loaded, "counters restored from the snapshot");
        }
        Ok(EmbeddedStore {
            counters,
            persisted,
            hasher,
            corrupt,
            dir: Some(dir.clone()),
            snapshot_lock: Mutex::new(()),
        })
    }

    /// A store that never touches disk: no state directory read or created, no record or
    /// snapshot written, identities hashed with `hasher` (`limiter-daemon replay` runs a log
    /// through the engine without leaving a trace in the operator's state).
    pub fn in_memory(settings: &StoreSettings, hasher: IdentityHasher) -> Self {
        EmbeddedStore {
            counters: Counters::new(
                settings.max_identities,
                u64::try_from(settings.sweep_interval.as_millis()).unwrap_or(u64::MAX),
            ),
            persisted: Persisted::in_memory(),
            hasher,
            corrupt: Vec::new(),
            dir: None,
            snapshot_lock: Mutex::new(()),
        }
    }

    /// Writes the counter snapshot now (what [`snapshotter::run`] calls off the request path).
    /// Returns how many identities it holds (0 and nothing written for an in-memory store).
    pub fn snapshot_counters(&self, now_ms: u64) -> Result<usize, StoreError> {
        let Some(dir) = &self.dir else {
            return Ok(0);
        };
        let _one_at_a_time = self.snapshot_lock.lock();
        snapshot::write(dir, &self.counters, now_ms)
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}

fn load_or_create_secret(
    dir: &Path,
    now_ms: u64,
    corrupt: &mut Vec<CorruptFile>,
) -> Result<Vec<u8>, StoreError> {
    let path = dir.join(SECRET_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => match hex::decode(text.trim()) {
            Ok(bytes) if bytes.len() >= 16 => return Ok(bytes),
            _ => corrupt.push(state_file::set_aside(
                &path,
                "not a hex secret of at least 16 bytes".to_string(),
                now_ms,
            )?),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(StoreError::Read { path, source }),
    }
    let secret: [u8; 32] = rand::random();
    state_file::write_bytes(&path, hex::encode(secret).as_bytes())?;
    tracing::info!(file = %path.display(), "generated the identity hashing secret");
    Ok(secret.to_vec())
}

impl CountStore for EmbeddedStore {
    fn hasher(&self) -> IdentityHasher {
        self.hasher.clone()
    }

    fn check_and_count(&self, req: &CountRequest) -> Result<CountOutcome, StoreError> {
        Ok(self.counters.check_and_count(req))
    }

    fn usage(&self, id: &IdKey, now_ms: u64) -> Result<Option<Usage>, StoreError> {
        Ok(self.counters.usage(id, now_ms))
    }

    fn identity_count(&self) -> usize {
        self.counters.len()
    }

    fn gate_and_count(&self, ip: IpAddr, req: &CountRequest) -> Result<Gate, StoreError> {
        lockout_then_count(self, ip, req)
    }

    fn persist_counters(&self, now_ms: u64) -> Result<Option<usize>, StoreError> {
        self.snapshot_counters(now_ms).map(Some)
    }
}

impl RecordStore for EmbeddedStore {
    fn put_key(&self, record: KeyRecord) -> Result<(), StoreError> {
        self.persisted.update_keys(|keys| {
            keys.insert(record.id.clone(), record);
            Ok(())
        })
    }

    fn key(&self, id: &str) -> Result<Option<KeyRecord>, StoreError> {
        Ok(self.persisted.keys.read().get(id).cloned())
    }

    fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        let mut v: Vec<KeyRecord> = self.persisted.keys.read().values().cloned().collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(v)
    }

    fn strikes(&self, ip: IpAddr) -> Result<Option<StrikeRecord>, StoreError> {
        Ok(self.persisted.enforcement.read().strikes.get(&ip).copied())
    }

    fn put_lockout(
        &self,
        lockout: Lockout,
        strikes: Option<StrikeRecord>,
    ) -> Result<(), StoreError> {
        self.persisted.update_enforcement(|e| {
            let now = lockout.since_ms;
            if let Some(s) = strikes {
                e.strikes.insert(lockout.ip, s);
            }
            e.lockouts.insert(lockout.ip, lockout);
            // Drop what has expired while we rewrite anyway. Strike records quiet for a week
            // are dropped too (at the default decay that forgives 168 strikes), so the file
            // stays bounded under a wide attack.
            e.lockouts.retain(|_, l| l.is_active(now));
            e.strikes
                .retain(|_, s| now.saturating_sub(s.quiet_from_ms) < STRIKE_RETENTION_MS);
        })
    }

    fn lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        if self.persisted.lockout_count.load(Ordering::Acquire) == 0 {
            return Ok(None);
        }
        Ok(self.persisted.enforcement.read().lockouts.get(&ip).cloned())
    }

    fn remove_lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        if !self.persisted.enforcement.read().lockouts.contains_key(&ip) {
            return Ok(None);
        }
        self.persisted
            .update_enforcement(|e| e.lockouts.remove(&ip))
    }

    fn forget_strikes(&self, ip: IpAddr) -> Result<bool, StoreError> {
        if !self.persisted.enforcement.read().strikes.contains_key(&ip) {
            return Ok(false);
        }
        self.persisted
            .update_enforcement(|e| e.strikes.remove(&ip).is_some())
    }

    fn lockouts(&self, now_ms: u64) -> Result<Vec<Lockout>, StoreError> {
        let mut v: Vec<Lockout> = self
            .persisted
            .enforcement
            .read()
            .lockouts
            .values()
            .filter(|l| l.is_active(now_ms))
            .cloned()
            .collect();
        v.sort_by_key(|l| (l.since_ms, l.ip));
        Ok(v)
    }

    fn list(&self, kind: ListKind) -> Result<Vec<ListEntry>, StoreError> {
        Ok(self
            .persisted
            .lists
            .read()
            .get(&kind)
            .cloned()
            .unwrap_or_default())
    }

    fn put_list_entry(&self, kind: ListKind, entry: ListEntry) -> Result<(), StoreError> {
        self.persisted.update_lists(|l| {
            let v = l.entry(kind).or_default();
            v.retain(|e| e.net != entry.net);
            v.push(entry);
        })
    }

    fn remove_list_entry(&self, kind: ListKind, net: &IpNet) -> Result<bool, StoreError> {
        self.persisted.remove_list_entry(kind, net)
    }

    fn corrupt_files(&self) -> Vec<CorruptFile> {
        self.corrupt.clone()
    }
}
