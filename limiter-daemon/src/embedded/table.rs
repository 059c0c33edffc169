//! One shard's identities: a dense array of (key, `Entry`) (64 bytes each, no per-slot
//! padding or empty slots) and a `hashbrown` index of `u32` positions into it (5 bytes a
//! bucket). The key kept is the first 12 bytes of the [`IdKey`] (namespace and 88 bits of
//! digest): two identities meeting in one slot is a 2^-80 event at millions of identities,
//! well below the truncation the 16-byte key itself already is. A `HashMap<IdKey, Entry>` spends a whole 68-byte slot on every empty bucket, and a
//! power-of-two table runs 44–87% full, so it cost 80–160 bytes an identity; here the empty
//! buckets cost 5 bytes each and the array grows by `Vec`'s doubling into pages that count
//! against memory only once written.
//!
//! Removal is batched (sweeps and evictions): the array is compacted in place and the index
//! rebuilt, an O(n) pass the shard already paid for scanning every entry.

use hashbrown::HashTable;

use crate::identity::hash::IdKey;
use crate::store::count::Entry;

/// What the table keeps of an [`IdKey`].
type Key = [u8; 12];

fn key(id: &IdKey) -> Key {
    let mut k = [0u8; 12];
    k.copy_from_slice(&id.0[..12]);
    k
}

fn id_of(k: &Key) -> IdKey {
    IdKey::from_prefix(k)
}

/// The key's digest is already uniform: the index uses it as the hash (as the map did).
fn hash(k: &Key) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&k[1..9]);
    u64::from_le_bytes(b) ^ u64::from(k[0]).rotate_left(56)
}

#[derive(Default)]
pub struct IdTable {
    entries: Vec<(Key, Entry)>,
    index: HashTable<u32>,
}

const _: () = assert!(std::mem::size_of::<(Key, Entry)>() == 64);

impl IdTable {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, id: &IdKey) -> Option<&Entry> {
        let (k, entries) = (key(id), &self.entries);
        self.index
            .find(hash(&k), |&i| entries[i as usize].0 == k)
            .map(|&i| &entries[i as usize].1)
    }

    pub fn get_mut(&mut self, id: &IdKey) -> Option<&mut Entry> {
        let (k, entries) = (key(id), &self.entries);
        let i = *self.index.find(hash(&k), |&i| entries[i as usize].0 == k)?;
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
        let k = key(&id);
        self.entries.push((k, entry));
        let entries = &self.entries;
        self.index
            .insert_unique(hash(&k), at, |&i| hash(&entries[i as usize].0));
        true
    }

    /// Every identity, its key as kept (the last 4 bytes zero; [`IdTable::insert`] of it
    /// finds the same slot, which is all a snapshot needs).
    pub fn iter(&self) -> impl Iterator<Item = (IdKey, Entry)> + '_ {
        self.entries.iter().map(|(k, e)| (id_of(k), *e))
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
        for (i, (k, _)) in entries.iter().enumerate() {
            // `i` < len, which `insert` keeps below 2^32.
            self.index
                .insert_unique(hash(k), i as u32, |&j| hash(&entries[j as usize].0));
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
        IdKey::from_prefix(&k)
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
