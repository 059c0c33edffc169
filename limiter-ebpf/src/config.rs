//! The runtime configuration the daemon writes into `LIM_CONFIG`, with the defaults used until it
//! has written one.

use aya_ebpf::EbpfContext;
use aya_log_ebpf::warn;
use limiter_common::KernelConfig;

use crate::maps::LIM_CONFIG;

/// Read in place like the map entry (a `.rodata` global), so neither is copied per packet.
static DEFAULT: KernelConfig = KernelConfig::DEFAULT;

/// Set once the missing-config warning has been logged, so it is logged once per load rather than
/// per packet. A racy flag is fine: at worst each CPU logs it once.
static mut MISSING_LOGGED: u8 = 0;

/// The configuration in force. A zeroed entry (never written: `v6_prefix_len` is 1..=128 in any
/// config the daemon writes) means [`KernelConfig::DEFAULT`].
#[inline(always)]
pub fn current<C: EbpfContext>(ctx: &C) -> &'static KernelConfig {
    match LIM_CONFIG.get(0) {
        Some(cfg) if cfg.v6_prefix_len != 0 => cfg,
        _ => {
            log_missing_once(ctx);
            &DEFAULT
        }
    }
}

#[inline(never)]
fn log_missing_once<C: EbpfContext>(ctx: &C) {
    let flag = core::ptr::addr_of_mut!(MISSING_LOGGED);
    // SAFETY: a byte in the program's .bss; concurrent writers store the same value.
    unsafe {
        if core::ptr::read_volatile(flag) == 0 {
            core::ptr::write_volatile(flag, 1);
            warn!(
                ctx,
                "limiter: no config in LIM_CONFIG yet, using built-in defaults"
            );
        }
    }
}
