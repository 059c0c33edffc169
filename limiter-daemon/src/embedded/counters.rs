//! In-memory counters, sharded by identity so cores rarely contend. Memory is bounded: each
//! shard sweeps out identities whose every window is stale (nothing forgotten changes an
//! answer), and past the configured ceiling it evicts the least recently seen (which can forget
//! a daily count early: the price of a hard memory bound, logged when it happens). Each shard
//! is an [`IdTable`]: about 75 bytes an identity, table included.
//!
//! A request that also counts against the caller's networks takes the shards of all its
//! holders, in shard order (so two requests never wait on each other in a cycle), and counts
//! them in one step ([`count::apply_all`]): still one atomic count per decision.

use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};

use super::table::IdTable;
use crate::identity::hash::IdKey;
use crate::store::count::{self, CountOutcome, CountRequest, Entry, Usage, NET_LEVELS};

pub const SHARDS: usize = 64;

struct Shard {
    map: IdTable,
    last_sweep_ms: u64,
}

pub struct Counters {
    shards: Box<[Mutex<Shard>]>,
    per_shard_cap: usize,
    sweep_ms: u64,
    len: AtomicUsize,
    forced_evictions: AtomicUsize,
}

/// The locked shard `i` among `guards`.
fn held<'a>(
    guards: &'a mut [Option<(usize, MutexGuard<'_, Shard>)>],
    i: usize,
) -> Option<&'a mut Shard> {
    guards
        .iter_mut()
        .flatten()
        .find(|(s, _)| *s == i)
        .map(|(_, g)| &mut **g)
}

impl Counters {
    pub fn new(max_identities: usize, sweep_ms: u64) -> Self {
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(Shard {
                    map: IdTable::default(),
                    last_sweep_ms: 0,
                })
            })
            .collect();
        Counters {
            shards,
            per_shard_cap: (max_identities / SHARDS).max(16),
            sweep_ms: sweep_ms.max(1),
            len: AtomicUsize::new(0),
            forced_evictions: AtomicUsize::new(0),
        }
    }

    fn shard(&self, id: &IdKey) -> &Mutex<Shard> {
        &self.shards[Self::shard_index(id)]
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Identities evicted while still counting (memory ceiling reached).
    pub fn forced_evictions(&self) -> usize {
        self.forced_evictions.load(Ordering::Relaxed)
    }

    fn shard_index(id: &IdKey) -> usize {
        // Byte 9 is digest material not used by the map's own hash (bytes 1..9).
        id.0[9] as usize % SHARDS
    }

    pub fn check_and_count(&self, req: &CountRequest) -> CountOutcome {
        if req.has_networks() {
            return self.check_and_count_holders(req);
        }
        let mut shard = self.shard(&req.id).lock();
        self.maybe_sweep(&mut shard, req.now_ms);
        if let Some(e) = shard.map.get_mut(&req.id) {
            return count::apply(e, req);
        }
        let mut e = Entry::default();
        let out = count::apply(&mut e, req);
        self.insert(&mut shard, req.id, e, req.now_ms);
        out
    }

    /// The caller and its networks in one step, under all their shards' locks.
    fn check_and_count_holders(&self, req: &CountRequest) -> CountOutcome {
        let mut ids = [Some(req.id), None, None];
        for (i, n) in req.networks.iter().enumerate() {
            ids[1 + i] = n.map(|n| n.id);
        }
        // Each distinct shard locked once, in ascending order; no allocation on this path.
        let shard_of = ids.map(|id| id.as_ref().map(Self::shard_index));
        let mut order = shard_of;
        order.sort_unstable();
        let mut guards: [Option<(usize, MutexGuard<'_, Shard>)>; 1 + NET_LEVELS] =
            [None, None, None];
        let mut last = None;
        for (slot, i) in order.iter().flatten().enumerate() {
            if last != Some(*i) {
                let mut g = self.shards[*i].lock();
                self.maybe_sweep(&mut g, req.now_ms);
                guards[slot] = Some((*i, g));
                last = Some(*i);
            }
        }
        let mut entries: [Entry; 1 + NET_LEVELS] = Default::default();
        for (h, e) in entries.iter_mut().enumerate() {
            if let (Some(id), Some(i)) = (&ids[h], shard_of[h]) {
                if let Some(g) = held(&mut guards, i) {
                    *e = g.map.get(id).copied().unwrap_or_default();
                }
            }
        }
        let [caller, n0, n1] = &mut entries;
        let out = count::apply_all(caller, [ids[1].map(|_| n0), ids[2].map(|_| n1)], req);
        for (h, e) in entries.into_iter().enumerate() {
            if let (Some(id), Some(i)) = (ids[h], shard_of[h]) {
                if let Some(g) = held(&mut guards, i) {
                    match g.map.get_mut(&id) {
                        Some(slot) => *slot = e,
                        None => self.insert(g, id, e, req.now_ms),
                    }
                }
            }
        }
        out
    }

    fn maybe_sweep(&self, shard: &mut Shard, now_ms: u64) {
        if now_ms.saturating_sub(shard.last_sweep_ms) >= self.sweep_ms {
            self.sweep(shard, now_ms);
        }
    }

    /// Adds an identity new to `shard`, making room first when the shard is at its ceiling.
    fn insert(&self, shard: &mut Shard, id: IdKey, e: Entry, now_ms: u64) {
        if shard.map.len() >= self.per_shard_cap {
            self.sweep(shard, now_ms);
            if shard.map.len() >= self.per_shard_cap {
                self.evict_oldest(shard);
            }
        }
        shard.map.insert(id, e);
        self.len.fetch_add(1, Ordering::Relaxed);
    }

    pub fn usage(&self, id: &IdKey, now_ms: u64) -> Option<Usage> {
        self.shard(id)
            .lock()
            .map
            .get(id)
            .map(|e| Usage::of(e, now_ms))
    }

    /// The identities of shard `i` with anything counted at `now_ms`, copied out under the
    /// shard's lock (one shard at a time: a snapshot never holds more than one lock, and only
    /// for the copy).
    pub fn copy_shard(&self, i: usize, now_ms: u64) -> Vec<(IdKey, Entry)> {
        let shard = self.shards[i].lock();
        shard
            .map
            .iter()
            .filter(|(_, e)| !e.is_stale(now_ms))
            .collect()
    }

    /// Puts back an identity read from a snapshot (at start, before any request). Past the
    /// ceiling the rest is dropped: the same bound as counting.
    pub fn restore(&self, id: IdKey, entry: Entry) -> bool {
        let mut shard = self.shard(&id).lock();
        if shard.map.len() >= self.per_shard_cap {
            return false;
        }
        if shard.map.insert(id, entry) {
            self.len.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Sweeps every shard now (tests and periodic maintenance).
    pub fn sweep_all(&self, now_ms: u64) {
        for s in self.shards.iter() {
            self.sweep(&mut s.lock(), now_ms);
        }
    }

    fn sweep(&self, shard: &mut Shard, now_ms: u64) {
        let removed = shard.map.retain(|e| !e.is_stale(now_ms));
        self.len.fetch_sub(removed, Ordering::Relaxed);
        shard.last_sweep_ms = now_ms;
    }

    /// Drops the least recently seen eighth of a full shard.
    fn evict_oldest(&self, shard: &mut Shard) {
        let mut seen: Vec<u32> = shard.map.iter().map(|(_, e)| e.last_seen_s).collect();
        let k = seen.len() / 8;
        let (_, cutoff, _) = seen.select_nth_unstable(k);
        let cutoff = *cutoff;
        let removed = shard.map.retain(|e| e.last_seen_s > cutoff);
        self.len.fetch_sub(removed, Ordering::Relaxed);
        self.forced_evictions.fetch_add(removed, Ordering::Relaxed);
        tracing::warn!(
            removed,
            "identity ceiling reached (store.max_identities): evicted the least recently seen"
        );
    }
}
