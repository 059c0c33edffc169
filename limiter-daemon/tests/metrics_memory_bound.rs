//! The operator page's memory stays within the bounds its modules state, measured in bytes
//! actually allocated (a counting global allocator, so nothing is estimated): 100,000 distinct
//! addresses recorded in the talker table from 16 threads (every shard in use, the worst case)
//! spread over ten minutes of slots, then another 100,000 within one 30 s slot (past the
//! per-slot cap), one in twenty under a distinct crawler name, and the history ring fed an
//! hour of samples.
//!
//! - The talker table takes at most [`Talkers::max_bytes`] whatever the traffic, and at any
//!   moment no more than [`Talkers::approx_bytes`] (what it reports of itself).
//! - The history ring takes at most [`History::max_bytes`] (30 KB), however long it runs.
//!
//! One test in this file: the allocator counts the whole process, so nothing else may run
//! beside it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

use limiter_daemon::admin::talkers::{
    Proof, Talkers, ENTRY_BYTES, MAX_CALLERS, MAX_NAMES, SHARDS, SLOTS,
};
use limiter_daemon::metrics::history::{History, Totals, POINTS, STEP_SECS};
use limiter_daemon::model::{Action, Tier};

/// Bytes live on the heap now.
static LIVE: AtomicIsize = AtomicIsize::new(0);

struct Counting;

// SAFETY: every call is passed to the system allocator unchanged; only the size is counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: the caller's contract is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> usize {
    usize::try_from(LIVE.load(Ordering::Relaxed)).unwrap_or(0)
}

const ADDRESSES: u32 = 100_000;
const THREADS: u32 = 16;

/// Records `ADDRESSES` distinct addresses from `base` on, [`THREADS`] threads at once, each
/// address at `secs_of(i)` (`i` counts within its thread); one in twenty under a name.
fn flood(t: &Talkers, names: &[Arc<String>], base: u32, secs_of: &(dyn Fn(u32) -> u64 + Sync)) {
    let per = ADDRESSES / THREADS;
    std::thread::scope(|s| {
        for w in 0..THREADS {
            s.spawn(move || {
                for i in 0..per {
                    let n = base + w * per + i;
                    let ip = IpAddr::from(Ipv4Addr::from(0x0a00_0000 | n));
                    let secs = secs_of(i);
                    let id = format!("ip:{:016x}", u64::from(n) * 0x9e37_79b9);
                    if n.is_multiple_of(20) {
                        let name = Arc::clone(&names[(n / 20) as usize % names.len()]);
                        let named = (name, Proof::Fake);
                        t.observe_named_at(secs, &id, Action::Allow, Some(ip), named);
                    } else {
                        t.observe_at(secs, &id, Tier::Anon, Action::Allow, Some(ip));
                    }
                }
            });
        }
    });
}

/// Checks the table against its bounds after a flood; `used` is what it allocated.
fn check(t: &Talkers, used: usize, phase: &str) {
    let held = t.entries();
    let reported = t.approx_bytes();
    let bound = Talkers::max_bytes();
    eprintln!(
        "talkers after {phase}: {held} callers held, {} KB allocated, {} KB reported; \
         bound {} MiB ({ENTRY_BYTES} B a caller, at most {} callers)",
        used / 1024,
        reported / 1024,
        bound / (1024 * 1024),
        SHARDS * SLOTS * MAX_CALLERS
    );
    assert!(held > 0, "the flood was recorded");
    assert!(held <= SHARDS * SLOTS * MAX_CALLERS, "{held} callers held");
    assert!(
        used <= reported,
        "{used} B allocated > {reported} B reported"
    );
    assert!(reported <= bound, "{reported} B > {bound} B");
}

#[test]
fn talkers_and_the_history_ring_stay_within_their_stated_bounds_under_100k_addresses() {
    // Names are made first: a pattern's is shared with the config, a verified agent's with
    // the decision that carried it; the table holds a count, not a copy.
    let names: Vec<Arc<String>> = (0..10_000)
        .map(|i| Arc::new(format!("crawler-{i:05}")))
        .collect();
    let before = live();
    let t = Talkers::default();
    let per = ADDRESSES / THREADS;
    // Ten minutes of slots: the window's ten, and the oldest reused (what it held freed).
    flood(&t, &names, 0, &|i| u64::from(i) * 600 / u64::from(per));
    check(
        &t,
        live().saturating_sub(before),
        "100,000 over ten minutes",
    );
    // 15 minutes later, 100,000 more inside one slot: each shard's slot stops at its cap.
    flood(&t, &names, ADDRESSES, &|_| 900);
    check(
        &t,
        live().saturating_sub(before),
        "100,000 more in one slot",
    );
    let r = t.read_at(900, usize::MAX, |_| None);
    assert_eq!(r.by_volume.len(), SHARDS * MAX_CALLERS, "each shard's cap");
    assert_eq!(
        r.untracked,
        u64::from(ADDRESSES) - (SHARDS * MAX_CALLERS) as u64
    );
    // 5,000 distinct names in that slot: each shard keeps at most MAX_NAMES.
    assert_eq!(r.named.len(), SHARDS * MAX_NAMES);
    drop(r);
    let bound = Talkers::max_bytes();
    assert!(bound <= 128 * 1024 * 1024, "the stated bound: {bound} B");

    let before = live();
    let h = History::default();
    for i in 0..3600 / STEP_SECS {
        h.record(Totals {
            at_ms: i * STEP_SECS * 1000,
            allow: i,
            ..Totals::default()
        });
    }
    let ring = live().saturating_sub(before);
    eprintln!(
        "history: {} samples, {ring} B allocated, bound {} B",
        h.len(),
        History::max_bytes()
    );
    assert_eq!(h.len(), POINTS + 1);
    assert!(
        ring <= History::max_bytes(),
        "{ring} B > {} B",
        History::max_bytes()
    );
    assert!(History::max_bytes() <= 64 * 1024);
}
