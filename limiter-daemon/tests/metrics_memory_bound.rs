//! The operator page's memory stays within the bounds its modules state, measured in bytes
//! actually allocated (a counting global allocator, so nothing is estimated): 100,000 distinct
//! addresses recorded in the talker table from 16 threads (every shard in use, the worst case)
//! over ten minutes of slots, 10,000 distinct crawler names among them, and the history ring
//! fed an hour of samples.
//!
//! - The talker table takes at most [`Talkers::max_bytes`] whatever the traffic, and at any
//!   moment no more than [`Talkers::approx_bytes`] (what it reports of itself).
//! - The history ring takes at most [`History::max_bytes`] (about 40 KB), however long it runs.
//!
//! One test in this file: the allocator counts the whole process, so nothing else may run
//! beside it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

use limiter_daemon::metrics::history::{History, Totals, POINTS, STEP_SECS};
use limiter_daemon::metrics::talkers::{
    Proof, Talkers, ENTRY_BYTES, MAX_CALLERS, MAX_NAMES, SHARDS, SLOTS,
};
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

#[test]
fn talkers_and_the_history_ring_stay_within_their_stated_bounds_under_100k_addresses() {
    let before = live();
    let t = Talkers::default();
    let empty = live() - before;
    let per = ADDRESSES / THREADS;
    // The names are built before the count starts mattering: a verified agent's is shared
    // with the decision that carried it, a pattern's with the config.
    let names: Vec<Arc<str>> = (0..10_000)
        .map(|i| Arc::from(format!("crawler-{i:05}").as_str()))
        .collect();
    let with_names = live();
    std::thread::scope(|s| {
        for w in 0..THREADS {
            let (t, names) = (&t, &names);
            s.spawn(move || {
                for i in 0..per {
                    let n = w * per + i;
                    let ip = IpAddr::from(Ipv4Addr::from(0x0a00_0000 | n));
                    // Ten minutes of slots: the window's ten and the reuse of the oldest.
                    let secs = u64::from(i) * 600 / u64::from(per);
                    let id = format!("ip:{:016x}", u64::from(n) * 0x9e37_79b9);
                    if n % 10 == 0 {
                        let name = Arc::clone(&names[(n / 10) as usize]);
                        t.observe_named_at(secs, &id, Action::Allow, Some(ip), (name, Proof::Fake));
                    } else {
                        t.observe_at(secs, &id, Tier::Anon, Action::Allow, Some(ip));
                    }
                }
            });
        }
    });
    let used = live().saturating_sub(with_names) + empty;
    let held = t.entries();
    let reported = t.approx_bytes();
    let bound = Talkers::max_bytes();
    eprintln!(
        "talkers: {held} callers held, {} KB allocated, {} KB reported, bound {} MB \
         ({ENTRY_BYTES} B a caller, at most {} callers)",
        used / 1024,
        reported / 1024,
        bound / (1024 * 1024),
        SHARDS * SLOTS * MAX_CALLERS
    );
    assert!(
        held <= SHARDS * SLOTS * MAX_CALLERS,
        "{held} callers held, more than the bound"
    );
    assert!(held > 0, "the flood was recorded");
    assert!(
        used <= reported,
        "{used} B allocated > {reported} B reported"
    );
    assert!(reported <= bound, "{reported} B > {bound} B");
    assert!(bound <= 160 * 1024 * 1024, "the stated bound: {bound} B");
    // Names are bounded per slot too: 10,000 distinct ones leave at most MAX_NAMES a slot.
    let r = t.read(usize::MAX, |_| None);
    assert!(
        r.named.len() <= SHARDS * SLOTS * MAX_NAMES,
        "{}",
        r.named.len()
    );
    drop(r);

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
