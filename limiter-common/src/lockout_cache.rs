//! The lockout cache: a direct-mapped array ([`crate::maps::MAP_LOCKOUT_CACHE`]) in front of the
//! lockout hash ([`crate::maps::MAP_LOCKOUT`]), so the kernel answers "is this source locked?"
//! with one inlined array load instead of a hash helper call.
//!
//! Each key has exactly one slot, [`lockout_slot`], computed the same way by the program and the
//! daemon. A slot holds at most one locked key (its *occupant*) with a copy of its lockout; when a
//! second locked key maps to an occupied slot, that key lives only in the hash and the slot's
//! `flags` get the key's overflow bit, [`overflow_bit`] (one of 32, from a second hash of the
//! key). `flags` is thus a one-word Bloom filter of the keys that overflowed into the slot: a clean
//! source whose slot is overflowed by other keys still skips the hash lookup unless its own bit
//! happens to be set (1 chance in 32 per overflowed key).
//!
//! # Invariant
//!
//! Every key present in the lockout hash with a non-zero deadline is either the occupant of its
//! slot (with the same deadline and level), or its slot's `flags` have its [`overflow_bit`] set;
//! and every occupant is present in the hash with the slot's deadline and level. The hash stays
//! the source of truth (listing, status, sweeping, restarts); the cache is derived from it and can
//! always be rebuilt from it.
//!
//! The program therefore reads the slot and: occupant == key → the slot's deadline decides;
//! otherwise the key's overflow bit set → the hash decides (the old path); otherwise → not locked,
//! with no hash lookup at all. Keys that collide cost what every lockout cost before the cache,
//! plus one array load; a stale overflow bit only costs that fallback, never a wrong verdict.
//!
//! The functions below are the pure slot transitions; the daemon and the test helpers apply them
//! to the maps, so every writer agrees on them.

use crate::{IpKey, Lockout};

/// log2 of [`crate::maps::LOCKOUT_CACHE_SLOTS`].
pub const LOCKOUT_CACHE_BITS: u32 = 18;

/// One cache slot. `deadline_ns == 0` means the slot has no occupant (`key` is then ignored);
/// `flags` (the overflow filter) survive a change of occupant.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockoutSlot {
    /// The occupant, network byte order (an [`IpKey`]).
    pub key: IpKey,
    /// Copy of the occupant's [`Lockout::deadline_ns`]; 0: no occupant.
    pub deadline_ns: u64,
    /// Copy of the occupant's [`Lockout::level`].
    pub level: u32,
    /// Overflow filter: the [`overflow_bit`] of every locked key of this slot that lives only in
    /// the hash (and possibly stale bits, which only cost a fallback).
    pub flags: u32,
}
const _: () = assert!(core::mem::size_of::<LockoutSlot>() == 32);
const _: () = assert!(core::mem::offset_of!(LockoutSlot, deadline_ns) == 16);

impl LockoutSlot {
    /// True when the slot holds a lockout.
    #[inline(always)]
    pub fn is_occupied(&self) -> bool {
        self.deadline_ns != 0
    }

    /// True when the slot's occupant is `key`.
    #[inline(always)]
    pub fn holds(&self, key: &IpKey) -> bool {
        self.is_occupied() && self.key == *key
    }

    /// True when some key overflowed into this slot (the filter is not empty).
    #[inline(always)]
    pub fn overflowed(&self) -> bool {
        self.flags != 0
    }

    /// True when `key`'s overflow bit is set: the program looks `key` up in the hash.
    #[inline(always)]
    pub fn may_overflow(&self, key: &IpKey) -> bool {
        self.flags & overflow_bit(key) != 0
    }

    /// The lockout the occupant carries (meaningful only when occupied).
    pub fn lockout(&self) -> Lockout {
        Lockout {
            deadline_ns: self.deadline_ns,
            level: self.level,
            _reserved: 0,
        }
    }

    /// The slot with no occupant, flags kept.
    pub fn vacated(&self) -> Self {
        Self {
            flags: self.flags,
            ..Self::default()
        }
    }
}

/// The slot of a key given as its two halves, each read as a little-endian `u64` of bytes 0..8
/// and 8..16 (what a BPF program gets by loading the 8-aligned key as two native words).
///
/// Fold to 32 bits with xor/rotate, multiply by an odd constant (Fibonacci hashing), keep the top
/// [`LOCKOUT_CACHE_BITS`] bits: three ALU ops and a multiply in BPF, and consecutive addresses
/// spread over the whole array. The function is public, so someone can choose colliding
/// addresses; collisions only cost the hash fallback, never a wrong verdict.
#[inline(always)]
pub const fn lockout_slot_halves(lo: u64, hi: u64) -> u32 {
    fold(lo, hi).wrapping_mul(0x9E37_79B1) >> (32 - LOCKOUT_CACHE_BITS)
}

/// The key's bit in its slot's overflow filter, from the halves as for [`lockout_slot_halves`]:
/// the top 5 bits of a second multiplicative hash of the same fold (independent of the slot bits
/// for keys of one slot), as a one-hot `u32`.
#[inline(always)]
pub const fn overflow_bit_halves(lo: u64, hi: u64) -> u32 {
    1 << (fold(lo, hi).wrapping_mul(0x85EB_CA77) >> 27)
}

/// 128 bits folded to 32 with xor and a rotate (cheap in BPF: no 128-bit arithmetic).
#[inline(always)]
const fn fold(lo: u64, hi: u64) -> u32 {
    let x = lo ^ hi.rotate_left(17);
    (x ^ (x >> 32)) as u32
}

/// The key's bit in its slot's overflow filter.
#[inline(always)]
pub const fn overflow_bit(key: &IpKey) -> u32 {
    let (lo, hi) = halves(key);
    overflow_bit_halves(lo, hi)
}

#[inline(always)]
const fn halves(key: &IpKey) -> (u64, u64) {
    let a = &key.addr;
    (
        u64::from_le_bytes([a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]]),
        u64::from_le_bytes([a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15]]),
    )
}

/// The slot of `key`, below [`crate::maps::LOCKOUT_CACHE_SLOTS`].
#[inline(always)]
pub const fn lockout_slot(key: &IpKey) -> u32 {
    let (lo, hi) = halves(key);
    lockout_slot_halves(lo, hi)
}

/// What `key`'s slot becomes after `key` was written to the hash with `lock`.
///
/// `occupant_in_hash` says whether the slot's current occupant, when it is a different key, is
/// still present in the hash; an occupant that is gone (unlocked or swept by a writer that did not
/// clean up) is simply replaced; an occupant still locked keeps the slot and `key`'s overflow bit
/// is set. A lock with deadline 0 (never drops) vacates a slot `key` held.
pub fn slot_on_lock(
    slot: &LockoutSlot,
    key: &IpKey,
    lock: &Lockout,
    occupant_in_hash: bool,
) -> LockoutSlot {
    if lock.deadline_ns == 0 {
        return slot_on_unlock(slot, key).unwrap_or(*slot);
    }
    if !slot.is_occupied() || slot.key == *key || !occupant_in_hash {
        LockoutSlot {
            key: *key,
            deadline_ns: lock.deadline_ns,
            level: lock.level,
            flags: slot.flags,
        }
    } else {
        LockoutSlot {
            flags: slot.flags | overflow_bit(key),
            ..*slot
        }
    }
}

/// What `key`'s slot becomes after `key` left the hash: `Some` (vacated, flags kept) when the
/// slot held it, `None` when the slot is unaffected.
pub fn slot_on_unlock(slot: &LockoutSlot, key: &IpKey) -> Option<LockoutSlot> {
    slot.holds(key).then(|| slot.vacated())
}

/// The slot a consistent cache has, given every locked key that maps to it (in hash order).
/// `keep` is the current occupant, preferred when it is among them, so a rebuild rewrites as few
/// slots as possible.
pub fn slot_from_keys(
    keep: Option<&IpKey>,
    keys: impl IntoIterator<Item = (IpKey, Lockout)> + Clone,
) -> LockoutSlot {
    let mut slot = LockoutSlot::default();
    if let Some(keep) = keep {
        for (key, lock) in keys.clone() {
            if key == *keep && lock.deadline_ns != 0 {
                slot = slot_on_lock(&slot, &key, &lock, true);
            }
        }
    }
    for (key, lock) in keys {
        if slot.holds(&key) || lock.deadline_ns == 0 {
            continue;
        }
        slot = slot_on_lock(&slot, &key, &lock, true);
    }
    slot
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::LOCKOUT_CACHE_SLOTS;

    fn lock(deadline_ns: u64, level: u32) -> Lockout {
        Lockout {
            deadline_ns,
            level,
            _reserved: 0,
        }
    }

    fn v4(n: u32) -> IpKey {
        IpKey::from_v4(n.to_be_bytes())
    }

    /// A key other than `key` with the same slot (searching upward from `from`).
    fn collider(key: &IpKey, from: u32) -> IpKey {
        let want = lockout_slot(key);
        (from..)
            .map(v4)
            .find(|k| k != key && lockout_slot(k) == want)
            .unwrap()
    }

    #[test]
    fn slots_are_in_range_and_spread() {
        assert_eq!(1u32 << LOCKOUT_CACHE_BITS, LOCKOUT_CACHE_SLOTS);
        // 2^16 consecutive IPv4 sources (a /16) land in distinct slots: no collision at all.
        let mut seen = [false; LOCKOUT_CACHE_SLOTS as usize];
        let mut collisions = 0;
        for i in 0..1u32 << 16 {
            let s = lockout_slot(&v4(0x0a00_0000 | i));
            assert!(s < LOCKOUT_CACHE_SLOTS);
            collisions += u32::from(seen[s as usize]);
            seen[s as usize] = true;
        }
        assert_eq!(collisions, 0);
        // IPv6 /64 keys differ only in bytes 0..8 and must spread too.
        let a = lockout_slot(&IpKey::from_v6(
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
            64,
        ));
        let b = lockout_slot(&IpKey::from_v6(
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0],
            64,
        ));
        assert_ne!(a, b);
    }

    #[test]
    fn overflow_bits_spread_within_a_slot() {
        // Keys of one slot must not share one overflow bit: count the bits 64 colliding keys use.
        let x = v4(0xc000_0207);
        let mut from = 0x0a00_0000;
        let mut bits = 0u32;
        for _ in 0..64 {
            let y = collider(&x, from);
            assert_eq!(overflow_bit(&y).count_ones(), 1);
            bits |= overflow_bit(&y);
            from = u32::from_be_bytes(y.addr[12..].try_into().unwrap()) + 1;
        }
        assert!(
            bits.count_ones() >= 24,
            "64 colliders used only {} bits",
            bits.count_ones()
        );
    }

    #[test]
    fn halves_match_the_byte_form() {
        let k = IpKey::from_v4([192, 0, 2, 7]);
        let lo = u64::from_le_bytes(k.addr[..8].try_into().unwrap());
        let hi = u64::from_le_bytes(k.addr[8..].try_into().unwrap());
        assert_eq!(lockout_slot_halves(lo, hi), lockout_slot(&k));
    }

    #[test]
    fn lock_takes_an_empty_or_own_slot_and_overflows_a_taken_one() {
        let x = v4(0xc000_0207);
        let y = collider(&x, 0x0a00_0000);
        let empty = LockoutSlot::default();
        let s = slot_on_lock(&empty, &x, &lock(100, 1), true);
        assert_eq!((s.key, s.deadline_ns, s.level, s.flags), (x, 100, 1, 0));
        // Re-locking the occupant updates it in place.
        let s = slot_on_lock(&s, &x, &lock(200, 2), true);
        assert_eq!((s.key, s.deadline_ns, s.level, s.flags), (x, 200, 2, 0));
        // A second live key keeps the occupant and sets its own overflow bit.
        let s = slot_on_lock(&s, &y, &lock(300, 1), true);
        assert_eq!((s.key, s.deadline_ns, s.flags), (x, 200, overflow_bit(&y)));
        assert!(s.may_overflow(&y));
        // A stale occupant (gone from the hash) is replaced; the filter survives.
        let s = slot_on_lock(&s, &y, &lock(300, 1), false);
        assert_eq!((s.key, s.deadline_ns, s.flags), (y, 300, overflow_bit(&y)));
        // A never-dropping lock (deadline 0) vacates its own slot and leaves others alone.
        let v = slot_on_lock(&s, &y, &lock(0, 1), true);
        assert!(!v.is_occupied());
        assert_eq!(v.flags, overflow_bit(&y));
        assert_eq!(slot_on_lock(&s, &x, &lock(0, 1), true), s);
    }

    #[test]
    fn unlock_vacates_only_its_own_slot() {
        let x = v4(1);
        let y = collider(&x, 2);
        let s = LockoutSlot {
            key: x,
            deadline_ns: 5,
            level: 1,
            flags: overflow_bit(&y),
        };
        assert_eq!(slot_on_unlock(&s, &y), None);
        let v = slot_on_unlock(&s, &x).unwrap();
        assert!(!v.is_occupied());
        assert!(v.overflowed(), "the other key still needs the fallback");
        assert_eq!(slot_on_unlock(&v, &x), None);
    }

    #[test]
    fn slot_from_keys_keeps_the_occupant_and_flags_only_real_overflow() {
        let x = v4(7);
        let y = collider(&x, 8);
        let both = [(y, lock(20, 2)), (x, lock(10, 1))];
        let s = slot_from_keys(Some(&x), both);
        assert_eq!((s.key, s.deadline_ns, s.flags), (x, 10, overflow_bit(&y)));
        let s = slot_from_keys(None, both);
        assert_eq!((s.key, s.deadline_ns, s.flags), (y, 20, overflow_bit(&x)));
        let s = slot_from_keys(Some(&x), [(y, lock(20, 2))]);
        assert_eq!((s.key, s.deadline_ns, s.flags), (y, 20, 0));
        assert_eq!(slot_from_keys(Some(&x), []), LockoutSlot::default());
        // A deadline-0 lockout needs no slot.
        assert_eq!(
            slot_from_keys(None, [(x, lock(0, 1))]),
            LockoutSlot::default()
        );
    }
}
