//! One shard's identities: a dense array of `(IdKey, Entry)` (68 bytes each, no per-slot
//! padding or empty slots) and a `hashbrown` index of `u32` positions into it (5 bytes a
//! bucket). A `HashMap<IdKey, Entry>` spends a whole 68-byte slot on every empty bucket, and a
//! power-of-two table runs 44–87% full, so it cost 80–160 bytes an identity; here the empty
//! buckets cost 5 bytes each and the array grows by `Vec`'s doubling into pages that count
//! against memory only once written.
//!
//! Removal is batched (sweeps and evictions): the array is compacted in place and the index
//! rebuilt, an O(n) pass the shard already paid for scanning every entry.

use hashbrown::HashTable;

use crate::identity::hash::IdKey;
use crate::store::count::Entry;

/// The key's digest is already uniform: the index uses it as the hash (as the map did).
fn hash(id: &IdKey) -> u64 {
    id.as_u64() ^ u64::from(id.0[0]).rotate_left(56)
}

#[derive(Default)]
pub struct IdTable {
    entries: Vec<(IdKey, Entry)>,
    index: HashTable<u32>,
}

impl IdTable {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, id: &IdKey) -> Option<&Entry> {
        let entries = &self.entries;
        self.index
            .find(hash(id), |&i| entries[i as usize].0 == *id)
            .map(|&i| &entries[i as usize].1)
    }

    pub fn get_mut(&mut self, id: &IdKey) -> Option<&mut Entry> {
        let entries = &self.entries;
        let i = *self
            .index
            .find(hash(id), |&i| entries[i as usize].0 == *id)?;
        Some(&mut self.entries[i as usize].1)
    }

    /// Adds `id`, or replaces its entry. Returns whether it was new.
    pub fn insert(&mut self, id: IdKey, entry: Entry) -> bool {
        if let Some(e) = self.get_mut(&id) {
            *e = entry;
            return false;
        }
        // A shard never nears 2^32 identities (`store.max_identities` bounds it).
        let at = u32::try_from(self.entries.len()).expect("shard below 2^32 identities");
        self.entries.push((id, entry));
        let entries = &self.entries;
        self.index
            .insert_unique(hash(&id), at, |&i| hash(&entries[i as usize].0));
        true
    }

    pub fn iter(&self) -> impl Iterator<Item = &(IdKey, Entry)> {
        self.entries.iter()
    }

    /// Keeps the identities `keep` accepts; returns how many were removed.
    pub fn retain(&mut self, mut keep: impl FnMut(&Entry) -> bool) -> usize {
        let before = self.entries.len();
        self.entries.retain(|(_, e)| keep(e));
        let removed = before - self.entries.len();
        if removed > 0 {
            self.reindex();
        }
        removed
    }

    /// Rebuilds the index over the (compacted) array, giving back memory when it emptied out.
    fn reindex(&mut self) {
        let len = self.entries.len();
        if self.entries.capacity() > 64 && len * 4 < self.entries.capacity() {
            self.entries.shrink_to_fit();
        }
        if self.index.capacity() > 64 && len * 4 < self.index.capacity() {
            self.index = HashTable::with_capacity(len);
        } else {
            self.index.clear();
        }
        let entries = &self.entries;
        for (i, (id, _)) in entries.iter().enumerate() {
            // `i` < len, which `insert` keeps below 2^32.
            self.index
                .insert_unique(hash(id), i as u32, |&j| hash(&entries[j as usize].0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32) -> IdKey {
        let mut k = [0u8; 16];
        k[0] = 1;
        k[1..5].copy_from_slice(&n.wrapping_mul(0x9e37_79b9).to_le_bytes());
        k[5..9].copy_from_slice(&n.to_le_bytes());
        IdKey(k)
    }

    #[test]
    fn finds_what_it_holds_after_removals() {
        let mut t = IdTable::default();
        for n in 0..5_000 {
            let e = Entry {
                last_seen_s: n,
                ..Entry::default()
            };
            assert!(t.insert(key(n), e));
        }
        let replaced = Entry {
            last_seen_s: 1,
            ..Entry::default()
        };
        assert!(!t.insert(key(7), replaced), "a replacement");
        assert_eq!(t.retain(|e| e.last_seen_s % 3 != 0), 1_667);
        for n in 0..5_000 {
            let found = t.get(&key(n)).map(|e| e.last_seen_s);
            let expect = (n % 3 != 0).then_some(if n == 7 { 1 } else { n });
            assert_eq!(found, expect, "{n}");
        }
        assert_eq!(t.len(), 3_333);
        t.retain(|_| false);
        assert!(t.is_empty() && t.get(&key(1)).is_none());
    }
}
