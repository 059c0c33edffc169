//! The nonces of verified signatures, remembered until their signature expires, so that a
//! signature carrying a nonce verifies once: a captured copy sent again (from anywhere) is
//! [`Seen::Repeat`], metered as what its sender otherwise is.
//!
//! - Keyed by (directory, nonce), hashed with a per-process random key (SipHash): 8 bytes an
//!   entry. Two nonces colliding make the second a "repeat": metered down, never up.
//! - Time-bucketed by `expires` ([`BUCKET_S`] a bucket): a bucket is dropped whole once every
//!   signature in it has expired, since an expired signature is refused anyway. With
//!   `[agents] max_signature_lifetime` at its default (5 min), about seven buckets are live.
//! - Bounded: at most `capacity` nonces (`[agents] nonce_capacity`). Past it the set fails
//!   closed: a signature with a nonce not seen before is [`Seen::Full`] (the caller is
//!   unverified, metered as what it otherwise is) until buckets expire, so the promise "a
//!   nonce is never verified twice within its life" holds at the bound too. Only signatures
//!   that verified are remembered: filling the set takes an agent's key.

use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasher, RandomState};

use parking_lot::Mutex;

/// Seconds of `expires` one bucket spans.
pub const BUCKET_S: i64 = 60;

/// What [`Nonces::remember`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Not seen within its life: remembered now.
    New,
    /// Seen before, and its signature has not expired: a replay (or a careless retry).
    Repeat,
    /// New, but the set is full: not remembered, so not to be verified.
    Full,
}

#[derive(Default)]
struct Inner {
    /// By `expires / BUCKET_S`.
    buckets: BTreeMap<i64, HashSet<u64>>,
    len: usize,
}

/// Nonces seen (see the module doc).
#[derive(Default)]
pub struct Nonces {
    inner: Mutex<Inner>,
    keyed: RandomState,
}

impl Nonces {
    /// Looks up the nonce `nonce` of `directory`'s signature expiring at `expires_s`, at
    /// `now_s`, and remembers it if new and there is room for `capacity`.
    pub fn remember(
        &self,
        directory: &str,
        nonce: &str,
        expires_s: i64,
        now_s: i64,
        capacity: usize,
    ) -> Seen {
        let key = self.keyed.hash_one((directory, nonce));
        let mut inner = self.inner.lock();
        inner.expire(now_s);
        if inner.buckets.values().any(|b| b.contains(&key)) {
            return Seen::Repeat;
        }
        if inner.len >= capacity {
            return Seen::Full;
        }
        inner
            .buckets
            .entry(expires_s.div_euclid(BUCKET_S))
            .or_default()
            .insert(key);
        inner.len += 1;
        Seen::New
    }

    /// Nonces held now.
    pub fn len(&self) -> usize {
        self.inner.lock().len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    /// Drops the buckets whose every signature has expired at `now_s` (a signature is refused
    /// once `expires < now`).
    fn expire(&mut self, now_s: i64) {
        while let Some(entry) = self.buckets.first_entry() {
            if (entry.key() + 1) * BUCKET_S > now_s {
                break;
            }
            self.len -= entry.remove().len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonce_is_seen_once_within_its_life_and_forgotten_after() {
        let n = Nonces::default();
        let t = 1_800_000_000;
        assert_eq!(n.remember("https://a/d", "n1", t + 300, t, 10), Seen::New);
        assert_eq!(
            n.remember("https://a/d", "n1", t + 300, t + 1, 10),
            Seen::Repeat
        );
        assert_eq!(
            n.remember("https://a/d", "n1", t + 300, t + 300, 10),
            Seen::Repeat,
            "still valid at its expiry second"
        );
        // Another agent's nonce of the same text is its own.
        assert_eq!(n.remember("https://b/d", "n1", t + 300, t, 10), Seen::New);
        // Once the signature has expired its bucket goes (the signature is refused anyway).
        assert_eq!(
            n.remember("https://c/d", "x", t + 900, t + 420, 10),
            Seen::New
        );
        assert_eq!(n.len(), 1, "the expired buckets were dropped");
        assert_eq!(
            n.remember("https://a/d", "n1", t + 900, t + 420, 10),
            Seen::New
        );
    }

    #[test]
    fn past_the_capacity_new_nonces_are_not_remembered_until_buckets_expire() {
        let n = Nonces::default();
        let t = 1_800_000_000;
        for i in 0..3 {
            assert_eq!(n.remember("d", &i.to_string(), t + 60, t, 3), Seen::New);
        }
        assert_eq!(n.remember("d", "3", t + 60, t, 3), Seen::Full);
        assert_eq!(
            n.remember("d", "0", t + 60, t, 3),
            Seen::Repeat,
            "a repeat still is"
        );
        assert_eq!(n.len(), 3);
        assert_eq!(
            n.remember("d", "3", t + 400, t + 200, 3),
            Seen::New,
            "room again"
        );
        assert_eq!(n.len(), 1);
    }
}
