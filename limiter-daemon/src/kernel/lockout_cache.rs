//! The lockout table: the lockout hash (`LIM_LOCKOUT`, the source of truth) and the direct-mapped
//! cache in front of it (`LIM_LOCKOUT_CACHE`), written together so the cache invariant of
//! [`limiter_common::lockout_cache`] holds: every locked key is its slot's occupant (same deadline
//! and level) or its slot's overflow filter has the key's bit.
//!
//! Every writer of lockouts goes through here: lock and unlock (the engine's sink, the `kernel`
//! CLI, the restore at start), the expiry sweep, and [`LockoutTable::rebuild`], which the
//! dataplane runs before attaching (pins left by an older build have a hash but no cache).
//!
//! # Order of writes, and races with the program
//!
//! A lock writes the hash first, then the slot; an unlock removes from the hash first, then
//! vacates the slot. Between the two writes the kernel sees the old verdict for that key (a lock
//! takes effect, or an unlock ends, when the slot write completes); the invariant is broken at
//! no other moment. Array updates from userspace are plain copies, not atomic with respect to the
//! program: a packet racing a slot write may read a mix of the old and new slot (the old key with
//! the new deadline, say), so that packet alone may be judged by the wrong deadline. The next
//! packet sees the finished write.
//!
//! Overflow bits are only ever set by lock; they are cleared by a repair ([`LockoutTable::sweep`]
//! repairs the slots that lost a key since the last repair). A stale bit costs a hash lookup for
//! keys of that slot that share it, never a wrong verdict. Within this process one mutex serialises writers;
//! a second process writing the same pins (the `kernel` CLI beside a running daemon) can race a
//! lock against an unlock in the same slot, which the next repair of that slot or a restart fixes.

use std::collections::{BTreeSet, HashMap as StdHashMap, HashSet};

use aya::maps::{Array, HashMap, MapData, MapError};
use limiter_common::lockout_cache::{lockout_slot, slot_from_keys, slot_on_lock, slot_on_unlock};
use limiter_common::maps::{MAP_LOCKOUT, MAP_LOCKOUT_CACHE};
use limiter_common::{IpKey, Lockout, LockoutSlot};
use parking_lot::Mutex;

use super::error::is_not_found;
use super::maps::open::open;
use super::pins::PinLayout;
use super::KernelError;

/// The two maps: writes go through one mutex; the hash is opened a second time for lookups and
/// scans, so listing lockouts never holds up one being written.
pub(crate) struct LockoutTable {
    writer: Mutex<Writer>,
    hash: HashMap<MapData, IpKey, Lockout>,
}

struct Writer {
    hash: HashMap<MapData, IpKey, Lockout>,
    cache: Array<MapData, LockoutSlot>,
    /// Overflowed slots that lost a key since the last repair: their filter may have stale bits.
    stale: BTreeSet<u32>,
    /// While a repair works from a snapshot taken outside the lock: the slots lock and unlock
    /// wrote since, which the repair must leave alone (its snapshot is older than they are).
    touched: Option<HashSet<u32>>,
}

/// A slot read back; `None` when the array is smaller than the index (a custom load), in which
/// case the program falls back to the hash and the cache has nothing to keep.
fn read_slot(
    cache: &Array<MapData, LockoutSlot>,
    index: u32,
) -> Result<Option<LockoutSlot>, KernelError> {
    match cache.get(&index, 0) {
        Ok(slot) => Ok(Some(slot)),
        Err(MapError::OutOfBounds { .. }) => Ok(None),
        Err(e) => Err(KernelError::map_op("reading", MAP_LOCKOUT_CACHE, e)),
    }
}

impl Writer {
    /// Records that lock or unlock changed `index`'s keys, for a repair in progress.
    fn touch(&mut self, index: u32) {
        if let Some(touched) = &mut self.touched {
            touched.insert(index);
        }
    }

    fn write_slot(&mut self, index: u32, slot: LockoutSlot) -> Result<(), KernelError> {
        self.cache
            .set(index, slot, 0)
            .map_err(|e| KernelError::map_op("writing", MAP_LOCKOUT_CACHE, e))
    }

    /// True unless the hash certainly lacks `key` (a failed lookup counts as present: keeping an
    /// occupant only costs a fallback, evicting a live one would let it through).
    fn in_hash(&self, key: &IpKey) -> bool {
        !matches!(self.hash.get(key, 0), Err(e) if is_not_found(&e))
    }

    /// After `key` left the hash: vacate its slot if it held it; remember an overflow filter that
    /// may now have a stale bit.
    fn forget(&mut self, key: &IpKey) -> Result<(), KernelError> {
        let index = lockout_slot(key);
        let Some(slot) = read_slot(&self.cache, index)? else {
            return Ok(());
        };
        if slot.overflowed() {
            self.stale.insert(index);
        }
        match slot_on_unlock(&slot, key) {
            Some(vacated) => self.write_slot(index, vacated),
            None => Ok(()),
        }
    }
}

impl LockoutTable {
    pub(crate) fn open(layout: &PinLayout) -> Result<Self, KernelError> {
        let writer = Writer {
            hash: open(layout, MAP_LOCKOUT)?,
            cache: open(layout, MAP_LOCKOUT_CACHE)?,
            stale: BTreeSet::new(),
            touched: None,
        };
        Ok(Self {
            writer: Mutex::new(writer),
            hash: open(layout, MAP_LOCKOUT)?,
        })
    }

    /// The hash, for lookups and listings (the source of truth).
    pub(crate) fn hash(&self) -> &HashMap<MapData, IpKey, Lockout> {
        &self.hash
    }

    /// Writes `key`'s lockout: the hash, then its slot (taking it when it is free, already ours,
    /// or held by a key no longer locked; otherwise setting the key's overflow bit).
    pub(crate) fn lock(
        &self,
        key: IpKey,
        value: Lockout,
        full: impl FnOnce(MapError, &HashMap<MapData, IpKey, Lockout>) -> KernelError,
    ) -> Result<(), KernelError> {
        let mut w = self.writer.lock();
        if let Err(e) = w.hash.insert(key, value, 0) {
            return Err(full(e, &w.hash));
        }
        let index = lockout_slot(&key);
        w.touch(index);
        let Some(slot) = read_slot(&w.cache, index)? else {
            return Ok(());
        };
        let occupant_in_hash = slot.is_occupied() && slot.key != key && w.in_hash(&slot.key);
        let next = slot_on_lock(&slot, &key, &value, occupant_in_hash);
        if next == slot {
            return Ok(());
        }
        w.write_slot(index, next)
    }

    /// Lifts `key`'s lockout: removes it from the hash, then vacates its slot if it held it.
    /// `false` when the hash had no such key.
    pub(crate) fn unlock(&self, key: &IpKey) -> Result<bool, KernelError> {
        let mut w = self.writer.lock();
        let removed = match w.hash.remove(key) {
            Ok(()) => true,
            Err(e) if is_not_found(&e) => false,
            Err(e) => return Err(KernelError::map_op("removing from", MAP_LOCKOUT, e)),
        };
        w.touch(lockout_slot(key));
        // Even when the hash had no entry: a slot still holding the key would keep dropping it.
        w.forget(key)?;
        Ok(removed)
    }

    /// Removes lockouts whose deadline is at or before `now` (hash and slot), then repairs the
    /// slots whose overflow filter may have gone stale. Returns how many lockouts were removed.
    pub(crate) fn sweep(&self, now: u64) -> Result<u32, KernelError> {
        self.writer.lock().touched = Some(HashSet::new());
        let result = self.sweep_and_repair(now);
        self.writer.lock().touched = None;
        result
    }

    fn sweep_and_repair(&self, now: u64) -> Result<u32, KernelError> {
        // The snapshot is taken without the lock; anything written meanwhile is in `touched`.
        let snapshot = self.snapshot()?;
        let mut removed = HashSet::new();
        for (key, _) in snapshot.iter().filter(|(_, l)| l.deadline_ns <= now) {
            let mut w = self.writer.lock();
            // Re-check under the lock: a fresh lockout may have replaced the expired one.
            match w.hash.get(key, 0) {
                Ok(l) if l.deadline_ns <= now => {}
                _ => continue,
            }
            match w.hash.remove(key) {
                Ok(()) => {
                    removed.insert(*key);
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(KernelError::map_op("removing from", MAP_LOCKOUT, e)),
            }
            w.forget(key)?;
        }
        let live = snapshot.into_iter().filter(|(k, _)| !removed.contains(k));
        let stale: Vec<u32> = std::mem::take(&mut self.writer.lock().stale)
            .into_iter()
            .collect();
        if !stale.is_empty() {
            self.repair(Some(&stale), live)?;
        }
        Ok(u32::try_from(removed.len()).unwrap_or(u32::MAX))
    }

    /// Makes the whole cache consistent with the hash, writing only slots that differ. Run before
    /// the program is attached (on a restart the pins may come from a build without the cache,
    /// or a crash may have come between a hash write and its slot write).
    pub(crate) fn rebuild(&self) -> Result<(), KernelError> {
        self.writer.lock().touched = Some(HashSet::new());
        let result = self
            .snapshot()
            .and_then(|s| self.repair(None, s.into_iter()));
        self.writer.lock().touched = None;
        result
    }

    /// Every (key, lockout) in the hash; an error aborts (a repair from a partial snapshot could
    /// clear an overflow bit a locked key needs).
    fn snapshot(&self) -> Result<Vec<(IpKey, Lockout)>, KernelError> {
        self.hash
            .iter()
            .map(|r| r.map_err(|e| KernelError::map_op("listing", MAP_LOCKOUT, e)))
            .collect()
    }

    /// Recomputes `slots` (all when `None`) from `live` (the hash as of a snapshot), under the
    /// write lock, skipping slots written since the snapshot (they are kept for the next repair).
    fn repair(
        &self,
        slots: Option<&[u32]>,
        live: impl Iterator<Item = (IpKey, Lockout)>,
    ) -> Result<(), KernelError> {
        let wanted: Option<HashSet<u32>> = slots.map(|s| s.iter().copied().collect());
        let mut by_slot: StdHashMap<u32, Vec<(IpKey, Lockout)>> = StdHashMap::new();
        for (key, lock) in live {
            let index = lockout_slot(&key);
            if wanted.as_ref().is_none_or(|w| w.contains(&index)) {
                by_slot.entry(index).or_default().push((key, lock));
            }
        }
        let mut w = self.writer.lock();
        let all: Vec<u32>;
        let indices: &[u32] = match slots {
            Some(s) => s,
            None => {
                all = (0..w.cache.len()).collect();
                &all
            }
        };
        let none = Vec::new();
        for &index in indices {
            if w.touched.as_ref().is_some_and(|t| t.contains(&index)) {
                w.stale.insert(index);
                continue;
            }
            let Some(current) = read_slot(&w.cache, index)? else {
                continue;
            };
            let keys = by_slot.get(&index).unwrap_or(&none);
            let keep = current.is_occupied().then_some(&current.key);
            let next = slot_from_keys(keep, keys.iter().copied());
            if next != current {
                w.write_slot(index, next)?;
            }
        }
        Ok(())
    }

    /// Every way the cache disagrees with the hash (empty when the invariant holds). Reads all
    /// 2^18 slots.
    #[cfg(test)]
    pub(crate) fn violations(&self) -> Result<Vec<String>, KernelError> {
        let snapshot = self.snapshot()?;
        let w = self.writer.lock();
        let mut out = Vec::new();
        for (key, lock) in &snapshot {
            if lock.deadline_ns == 0 {
                continue;
            }
            let Some(slot) = read_slot(&w.cache, lockout_slot(key))? else {
                continue;
            };
            let cached = slot.holds(key) && slot.lockout() == *lock;
            if !cached && !slot.may_overflow(key) {
                out.push(format!(
                    "{key:?} ({lock:?}) locked but its slot is {slot:?}"
                ));
            }
        }
        let hash: StdHashMap<IpKey, Lockout> = snapshot.into_iter().collect();
        for index in 0..w.cache.len() {
            let Some(slot) = read_slot(&w.cache, index)? else {
                continue;
            };
            if !slot.is_occupied() {
                continue;
            }
            if lockout_slot(&slot.key) != index {
                out.push(format!(
                    "slot {index} holds {:?}, which is not its slot",
                    slot.key
                ));
            }
            if hash.get(&slot.key) != Some(&slot.lockout()) {
                out.push(format!(
                    "slot {index} holds {slot:?}, not in the hash as such"
                ));
            }
        }
        Ok(out)
    }

    /// The slot `key` maps to, as the program reads it.
    #[cfg(test)]
    pub(crate) fn slot_of(&self, key: &IpKey) -> Result<Option<LockoutSlot>, KernelError> {
        read_slot(&self.writer.lock().cache, lockout_slot(key))
    }
}
