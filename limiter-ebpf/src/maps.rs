//! The program's maps. Each static is named exactly like its `limiter_common::maps::MAP_*`
//! constant (aya finds maps by symbol name) and sized by the matching `*_CAPACITY`.
//!
//! Every map is declared pinnable by name, so a loader given `map_pin_path` (or
//! `default_map_pin_directory`) reuses what an earlier daemon pinned: lockouts, lists, buckets and
//! counters survive a daemon restart. Without either, aya 0.14 pins `ByName` maps under
//! `/sys/fs/bpf/<NAME>`, so tests and benchmarks give each loaded instance a directory of its own.

use aya_ebpf::{
    bindings::BPF_F_NO_PREALLOC,
    macros::map,
    maps::{Array, HashMap, LpmTrie, LruHashMap, PerCpuArray, RingBuf},
};
use limiter_common::{
    maps::{
        AllowMark, CidrBytes, Counter, PortMark, ALLOW_CAPACITY, BUCKET_CAPACITY, DENY_CAPACITY,
        EVENTS_BYTES, LOCKOUT_CACHE_SLOTS, LOCKOUT_CAPACITY, PORTS_CAPACITY, TIER_CAPACITY,
    },
    verdict, Bucket, DenyEntry, IpKey, KernelConfig, Lockout, LockoutSlot, TierEntry,
};

#[map]
pub static LIM_CONFIG: Array<KernelConfig> = Array::pinned(1, 0);

#[map]
pub static LIM_PORTS: Array<PortMark> = Array::pinned(PORTS_CAPACITY, 0);

#[map]
pub static LIM_ALLOW: LpmTrie<CidrBytes, AllowMark> = LpmTrie::pinned(ALLOW_CAPACITY, 0);

#[map]
pub static LIM_DENY: LpmTrie<CidrBytes, DenyEntry> = LpmTrie::pinned(DENY_CAPACITY, 0);

// A plain hash, never LRU: a spoofed flood must not be able to evict a ban. Not preallocated:
// only the daemon inserts, and a mostly empty table should not pin tens of MB of kernel memory.
#[map]
pub static LIM_LOCKOUT: HashMap<IpKey, Lockout> =
    HashMap::pinned(LOCKOUT_CAPACITY, BPF_F_NO_PREALLOC);

// The direct-mapped cache in front of LIM_LOCKOUT (limiter_common::lockout_cache): an array, so
// the verifier inlines the lookup into a bounds check and an address computation, where the hash
// lookup above is a real call (jhash and a bucket walk, behind retpolines/return thunks).
#[map]
pub static LIM_LOCKOUT_CACHE: Array<LockoutSlot> = Array::pinned(LOCKOUT_CACHE_SLOTS, 0);

#[map]
pub static LIM_TIER: LruHashMap<IpKey, TierEntry> = LruHashMap::pinned(TIER_CAPACITY, 0);

#[map]
pub static LIM_BUCKET: LruHashMap<IpKey, Bucket> = LruHashMap::pinned(BUCKET_CAPACITY, 0);

#[map]
pub static LIM_COUNTERS: PerCpuArray<Counter> = PerCpuArray::pinned(verdict::COUNT, 0);

#[map]
pub static LIM_EVENTS: RingBuf = RingBuf::pinned(EVENTS_BYTES, 0);

/// Per-CPU countdown to the next sampled over-ceiling event. Program-private and not pinned: a new
/// load simply starts a fresh countdown. (A countdown instead of `nth % sample_every` because a
/// 64-bit division costs more than the rest of the drop path.)
#[map]
pub static LIM_SAMPLER: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// Adds one to `index`'s per-CPU counter (a no-op for an invalid index, which the callers'
/// constants rule out).
#[inline(always)]
pub fn count(index: u32) {
    // The null check is for the verifier: every index passed is below `verdict::COUNT`.
    if let Some(slot) = LIM_COUNTERS.get_ptr_mut(index) {
        // SAFETY: a per-CPU array slot is only ever touched by this CPU while the program runs
        // (programs do not migrate mid-run), so the plain read-modify-write does not race.
        unsafe { *slot += 1 }
    }
}
