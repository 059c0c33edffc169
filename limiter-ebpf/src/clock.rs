//! The program's one clock: `CLOCK_BOOTTIME`, which the daemon also writes every deadline on.

use aya_ebpf::helpers::bpf_ktime_get_boot_ns;

/// Nanoseconds of `CLOCK_BOOTTIME`. A helper call, so callers read it only on paths that need it.
#[inline(always)]
pub fn now_ns() -> u64 {
    // SAFETY: helper without arguments or preconditions.
    unsafe { bpf_ktime_get_boot_ns() }
}
