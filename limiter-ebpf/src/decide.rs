//! The decision core shared by the XDP and TC entry points: parse, apply the verdict order, bump
//! exactly one verdict counter, and answer pass or drop.
//!
//! Order (first match wins): allow-list → lockout → deny-list → connection ceiling → pass.
//! Lockouts and the deny-list apply to TCP to protected ports, or to every packet from the source
//! when `FLAG_LOCK_ALL_PORTS` is set; the ceiling applies to SYN-without-ACK to protected ports.

use aya_ebpf::EbpfContext;
use limiter_common::{
    config::{FLAG_HAS_ALLOW, FLAG_HAS_DENY, FLAG_LOCK_ALL_PORTS},
    lockout_cache::{lockout_slot_halves, overflow_bit_halves},
    verdict, KernelConfig,
};

use crate::{
    ceiling,
    clock::now_ns,
    config,
    key::HashKey,
    maps::{self, LIM_ALLOW, LIM_DENY, LIM_LOCKOUT, LIM_LOCKOUT_CACHE, LIM_PORTS},
    parse::{parse, Packet},
};

/// Pass or drop; each entry point maps it to its own return codes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Pass,
    Drop,
}

/// Judges the frame between `start` and `end` and counts the verdict.
#[inline(always)]
pub fn run<C: EbpfContext>(ctx: &C, start: usize, end: usize) -> Action {
    let pkt = match parse(start, end) {
        Ok(pkt) => pkt,
        Err(counter) => {
            maps::count(counter);
            return Action::Pass;
        }
    };
    let cfg = config::current(ctx);
    let counter = decide(&pkt, cfg);
    maps::count(counter);
    match counter {
        verdict::DROP_LOCKED | verdict::DROP_DENIED => Action::Drop,
        verdict::DROP_CEILING => {
            ceiling::sample(cfg, &pkt);
            Action::Drop
        }
        _ => Action::Pass,
    }
}

#[inline(always)]
fn is_protected(pkt: &Packet) -> bool {
    if !pkt.tcp {
        return false;
    }
    match LIM_PORTS.get(pkt.dport as u32) {
        Some(mark) => *mark != 0,
        // Unreachable (the array has an entry for every port), but the verifier requires the
        // lookup's null check.
        None => false,
    }
}

/// The deadline of `key`'s lockout, if it has one: from its cache slot when it occupies it, from
/// the hash when the slot's overflow filter has the key's bit, otherwise none without touching
/// the hash (see `limiter_common::lockout_cache` for the invariant that makes this exact).
#[inline(always)]
fn lockout_deadline(key: &HashKey) -> Option<u64> {
    let [lo, hi] = key.words();
    // `None` only if the array is smaller than the index (a custom load): the hash then decides.
    if let Some(slot) = LIM_LOCKOUT_CACHE.get_ptr(lockout_slot_halves(lo, hi)) {
        // SAFETY: a valid, 8-aligned map value pointer for this run; the key occupies its first
        // 16 bytes, read as two words instead of a byte loop. The daemon writes slots with plain
        // array updates, so a packet racing a write may see a mix of old and new contents: that
        // packet alone may be judged by the old or new state (see the daemon's lockout_cache.rs).
        unsafe {
            let words = slot.cast::<u64>();
            let deadline = (*slot).deadline_ns;
            if deadline != 0 && *words == lo && *words.add(1) == hi {
                return Some(deadline);
            }
            if (*slot).flags & overflow_bit_halves(lo, hi) == 0 {
                return None;
            }
        }
    }
    // SAFETY: valid map value pointer for this run.
    LIM_LOCKOUT
        .get_ptr(key.as_ip_key())
        .map(|lock| unsafe { (*lock).deadline_ns })
}

/// The verdict counter for a parsed packet; the counter also says pass or drop.
#[inline(always)]
fn decide(pkt: &Packet, cfg: &KernelConfig) -> u32 {
    let protected = is_protected(pkt);
    let all_ports = cfg.flags & FLAG_LOCK_ALL_PORTS != 0;
    if !protected && !all_ports {
        return verdict::PASS_UNPROTECTED;
    }
    // Skipped entirely when the list is empty: empty lists must cost nothing.
    if cfg.flags & FLAG_HAS_ALLOW != 0 && LIM_ALLOW.get(pkt.cidr_key().as_trie_key()).is_some() {
        return verdict::PASS_ALLOWED;
    }
    let key = pkt.key(cfg.v6_prefix_len);
    if let Some(deadline) = lockout_deadline(&key) {
        // An expired lockout passes; the daemon removes it in its own time.
        if now_ns() < deadline {
            return verdict::DROP_LOCKED;
        }
    }
    if cfg.flags & FLAG_HAS_DENY != 0 {
        if let Some(deny) = LIM_DENY.get(pkt.cidr_key().as_trie_key()) {
            let deadline = deny.deadline_ns;
            if deadline == 0 || now_ns() < deadline {
                return verdict::DROP_DENIED;
            }
        }
    }
    if !protected {
        return verdict::PASS_UNPROTECTED;
    }
    if !pkt.syn_only {
        return verdict::PASS_CLEAN;
    }
    let now = now_ns();
    let tier = ceiling::tier_of(key.as_ip_key(), now);
    if ceiling::admit(key.as_ip_key(), cfg, tier, now) {
        verdict::PASS_SYN
    } else {
        verdict::DROP_CEILING
    }
}
