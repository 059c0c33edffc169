//! The persistent half of the embedded store: API keys, strikes and lockouts, allow/deny lists,
//! each in its own JSON file in the state directory, rewritten atomically on every change.
//! Changes are rare (issuing a key, a lockout), so whole-file rewrites are cheap and simple.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use ipnet::IpNet;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

use crate::model::{KeyRecord, ListEntry, ListKind, Lockout, StrikeRecord};
use crate::store::error::{CorruptFile, StoreError};
use crate::store::state_file::{self, Loaded};

pub const KEYS_FILE: &str = "keys.json";
pub const ENFORCEMENT_FILE: &str = "enforcement.json";
pub const LISTS_FILE: &str = "lists.json";

#[derive(Default, Serialize, Deserialize)]
struct KeysFile {
    keys: Vec<KeyRecord>,
}

#[derive(Clone, Copy, Serialize, Deserialize)]
struct StrikeLine {
    ip: IpAddr,
    #[serde(flatten)]
    record: StrikeRecord,
}

#[derive(Default, Serialize, Deserialize)]
struct EnforcementFile {
    lockouts: Vec<Lockout>,
    strikes: Vec<StrikeLine>,
}

#[derive(Default, Serialize, Deserialize)]
struct ListsFile {
    allow: Vec<ListEntry>,
    deny: Vec<ListEntry>,
}

#[derive(Default)]
pub struct Enforcement {
    pub lockouts: HashMap<IpAddr, Lockout>,
    pub strikes: HashMap<IpAddr, StrikeRecord>,
}

pub struct Persisted {
    /// `None`: held in memory only (see [`Persisted::in_memory`]).
    dir: Option<PathBuf>,
    pub keys: RwLock<HashMap<String, KeyRecord>>,
    pub enforcement: RwLock<Enforcement>,
    /// Lockouts held (active or not yet pruned): zero lets the request path skip the lock,
    /// so the common case touches no shared cache line.
    pub lockout_count: AtomicUsize,
    pub lists: RwLock<HashMap<ListKind, Vec<ListEntry>>>,
    /// Serialises file writes so an older snapshot never overwrites a newer one.
    write_lock: Mutex<()>,
    pub corrupt: Vec<CorruptFile>,
}

fn load<T: Default + for<'de> Deserialize<'de>>(
    path: &Path,
    now_ms: u64,
    corrupt: &mut Vec<CorruptFile>,
) -> Result<T, StoreError> {
    Ok(match state_file::read_json::<T>(path, now_ms)? {
        Loaded::Missing => T::default(),
        Loaded::Ok(v) => v,
        Loaded::Corrupt(c) => {
            corrupt.push(c);
            T::default()
        }
    })
}

impl Persisted {
    pub fn open(dir: &Path, now_ms: u64) -> Result<Self, StoreError> {
        let mut corrupt = Vec::new();
        let keys: KeysFile = load(&dir.join(KEYS_FILE), now_ms, &mut corrupt)?;
        let enf: EnforcementFile = load(&dir.join(ENFORCEMENT_FILE), now_ms, &mut corrupt)?;
        let lists: ListsFile = load(&dir.join(LISTS_FILE), now_ms, &mut corrupt)?;
        let lockout_count = AtomicUsize::new(enf.lockouts.len());
        let mut list_map = HashMap::new();
        list_map.insert(ListKind::Allow, lists.allow);
        list_map.insert(ListKind::Deny, lists.deny);
        Ok(Persisted {
            dir: Some(dir.to_path_buf()),
            keys: RwLock::new(keys.keys.into_iter().map(|k| (k.id.clone(), k)).collect()),
            enforcement: RwLock::new(Enforcement {
                lockouts: enf.lockouts.into_iter().map(|l| (l.ip, l)).collect(),
                strikes: enf.strikes.into_iter().map(|s| (s.ip, s.record)).collect(),
            }),
            lists: RwLock::new(list_map),
            lockout_count,
            write_lock: Mutex::new(()),
            corrupt,
        })
    }

    /// Records that live and die with the process: nothing read, nothing ever written (a
    /// replay must never touch the operator's state directory).
    pub fn in_memory() -> Self {
        let mut lists = HashMap::new();
        lists.insert(ListKind::Allow, Vec::new());
        lists.insert(ListKind::Deny, Vec::new());
        Persisted {
            dir: None,
            keys: RwLock::new(HashMap::new()),
            enforcement: RwLock::new(Enforcement::default()),
            lists: RwLock::new(lists),
            lockout_count: AtomicUsize::new(0),
            write_lock: Mutex::new(()),
            corrupt: Vec::new(),
        }
    }

    fn write<T: Serialize>(&self, file: &str, value: &T) -> Result<(), StoreError> {
        match &self.dir {
            Some(dir) => state_file::write_json(&dir.join(file), value),
            None => Ok(()),
        }
    }

    /// Applies `change` to the keys and rewrites the keys file.
    pub fn update_keys<R>(
        &self,
        change: impl FnOnce(&mut HashMap<String, KeyRecord>) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let _w = self.write_lock.lock();
        let r = change(&mut self.keys.write())?;
        let mut keys: Vec<KeyRecord> = self.keys.read().values().cloned().collect();
        keys.sort_by(|a, b| a.id.cmp(&b.id));
        self.write(KEYS_FILE, &KeysFile { keys })?;
        Ok(r)
    }

    pub fn update_enforcement<R>(
        &self,
        change: impl FnOnce(&mut Enforcement) -> R,
    ) -> Result<R, StoreError> {
        let _w = self.write_lock.lock();
        let r = {
            let mut e = self.enforcement.write();
            let r = change(&mut e);
            self.lockout_count
                .store(e.lockouts.len(), Ordering::Release);
            r
        };
        let file = {
            let e = self.enforcement.read();
            EnforcementFile {
                lockouts: e.lockouts.values().cloned().collect(),
                strikes: e
                    .strikes
                    .iter()
                    .map(|(ip, record)| StrikeLine {
                        ip: *ip,
                        record: *record,
                    })
                    .collect(),
            }
        };
        self.write(ENFORCEMENT_FILE, &file)?;
        Ok(r)
    }

    pub fn update_lists<R>(
        &self,
        change: impl FnOnce(&mut HashMap<ListKind, Vec<ListEntry>>) -> R,
    ) -> Result<R, StoreError> {
        let _w = self.write_lock.lock();
        let r = change(&mut self.lists.write());
        let file = {
            let l = self.lists.read();
            ListsFile {
                allow: l.get(&ListKind::Allow).cloned().unwrap_or_default(),
                deny: l.get(&ListKind::Deny).cloned().unwrap_or_default(),
            }
        };
        self.write(LISTS_FILE, &file)?;
        Ok(r)
    }

    pub fn remove_list_entry(&self, kind: ListKind, net: &IpNet) -> Result<bool, StoreError> {
        self.update_lists(|l| {
            let v = l.entry(kind).or_default();
            let before = v.len();
            v.retain(|e| &e.net != net);
            v.len() != before
        })
    }
}
