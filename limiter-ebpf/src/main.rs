//! The limiter's kernel program: an XDP entry point and a TC classifier sharing one decision core
//! (`decide`), plus a pass-only XDP program used as the benchmark's baseline.
//!
//! Modules: `parse` (headers), `config` (runtime config), `decide` (verdict order and counting),
//! `ceiling` (tier, token bucket, sampled events), `clock` (the kernel clock), `key` (aligned map
//! keys), `maps` (map definitions).
#![no_std]
#![no_main]

mod ceiling;
mod clock;
mod config;
mod decide;
mod key;
mod maps;
mod parse;

use aya_ebpf::{
    bindings::{xdp_action, TC_ACT_OK, TC_ACT_SHOT},
    macros::{classifier, xdp},
    programs::{TcContext, XdpContext},
};

use decide::Action;

/// Bytes the TC path makes linear before parsing: Ethernet, two tags, IPv6 with extension headers
/// and TCP fit easily.
const TC_PULL_LEN: u32 = 256;

#[xdp]
pub fn limiter_xdp(ctx: XdpContext) -> u32 {
    match try_xdp(&ctx) {
        Ok(action) => action,
        Err(()) => xdp_action::XDP_PASS,
    }
}

/// Never fails today; the `Result` keeps the fail-open shape for any fallible step added later.
#[inline(always)]
fn try_xdp(ctx: &XdpContext) -> Result<u32, ()> {
    Ok(match decide::run(ctx, ctx.data(), ctx.data_end()) {
        Action::Pass => xdp_action::XDP_PASS,
        Action::Drop => xdp_action::XDP_DROP,
    })
}

#[classifier]
pub fn limiter_tc(ctx: TcContext) -> i32 {
    match try_tc(&ctx) {
        Ok(action) => action,
        Err(()) => TC_ACT_OK,
    }
}

#[inline(always)]
fn try_tc(ctx: &TcContext) -> Result<i32, ()> {
    // An skb's headers may sit outside its linear part; pull them in so direct packet access sees
    // them. If the pull fails the parse sees a short frame and passes it as malformed.
    let linear = ctx.data_end() - ctx.data();
    let len = ctx.len();
    if (linear as u32) < TC_PULL_LEN && len as usize > linear {
        let want = if len < TC_PULL_LEN { len } else { TC_PULL_LEN };
        if ctx.pull_data(want).is_err() {
            // Nothing else to do: the parse below judges what is linear.
        }
    }
    Ok(match decide::run(ctx, ctx.data(), ctx.data_end()) {
        Action::Pass => TC_ACT_OK,
        Action::Drop => TC_ACT_SHOT,
    })
}

/// Benchmark baseline: the cost of running any XDP program at all. Never attached by the daemon.
#[xdp]
pub fn limiter_bench_pass(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_PASS
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
