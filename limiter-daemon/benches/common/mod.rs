//! What the throughput benches share (included with `mod common;`): the seconds per row from
//! `BENCH_SECS`, and the timing loop that runs an operation on N threads for a fixed time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Seconds per measured row: `BENCH_SECS` when set to a number, else `default`.
pub fn bench_secs(default: f64) -> f64 {
    std::env::var("BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `op(thread, n)` on `threads` threads for `secs` (`n` counts that thread's calls from 0)
/// and returns calls per second over all threads. The stop flag is read once per 256 calls so
/// the loop itself costs next to nothing.
pub fn ops_per_sec(threads: usize, secs: f64, op: impl Fn(usize, u64) + Sync) -> f64 {
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (stop, total, op) = (&stop, &total, &op);
            s.spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        op(t, n);
                        n += 1;
                    }
                }
                total.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
    });
    total.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}
