//! The program's clock: `CLOCK_BOOTTIME` (what the daemon writes every deadline on), read at most
//! once per jiffy.
//!
//! `bpf_ktime_get_boot_ns` is a real helper call and costs more than the rest of a packet's path
//! on some hosts (about 35 ns in the VM this was measured on). `bpf_jiffies64` is inlined by the
//! verifier into one load, so the program keeps the last boot-time reading beside the jiffy it was
//! taken in and reuses it until the jiffy changes. The value is therefore a genuine
//! `CLOCK_BOOTTIME` reading at most one jiffy (1–10 ms, by `CONFIG_HZ`) old: a lockout can outlast
//! its deadline by that much, and bucket refills advance in jiffy steps.
//!
//! The cache is two globals shared by all CPUs. Readers racing a refresh may pair a new jiffy with
//! the previous reading, which is one jiffy older still; no other interleaving is possible.

use aya_ebpf::helpers::{bpf_jiffies64, bpf_ktime_get_boot_ns};

/// Jiffy of the cached reading (0 before the first).
static mut CACHED_JIFFY: u64 = 0;
/// `CLOCK_BOOTTIME` ns read during `CACHED_JIFFY`.
static mut CACHED_NOW: u64 = 0;

/// Nanoseconds of `CLOCK_BOOTTIME`, at most one jiffy stale.
#[inline(always)]
pub fn now_ns() -> u64 {
    // SAFETY: helpers without arguments or preconditions; the statics live in the program's .bss
    // and are only read and written whole with volatile accesses.
    unsafe {
        let jiffy = bpf_jiffies64();
        if core::ptr::read_volatile(core::ptr::addr_of!(CACHED_JIFFY)) == jiffy {
            return core::ptr::read_volatile(core::ptr::addr_of!(CACHED_NOW));
        }
        let now = bpf_ktime_get_boot_ns();
        core::ptr::write_volatile(core::ptr::addr_of_mut!(CACHED_NOW), now);
        core::ptr::write_volatile(core::ptr::addr_of_mut!(CACHED_JIFFY), jiffy);
        now
    }
}
