//! The connection ceiling: the source's tier, its token bucket in `LIM_BUCKET`, and sampled
//! over-ceiling events in `LIM_EVENTS`.

use limiter_common::{
    config::{MAX_PER_SEC, TIER_ANON, TIER_COUNT},
    Bucket, CeilingEvent, IpKey, KernelConfig,
};

use crate::{
    clock::now_ns,
    maps::{LIM_BUCKET, LIM_EVENTS, LIM_SAMPLER, LIM_TIER},
    parse::Packet,
};

/// The tier the daemon verified for `key`, if that entry has not expired; else anonymous.
#[inline(always)]
pub fn tier_of(key: &IpKey, now: u64) -> u32 {
    match LIM_TIER.get_ptr(key) {
        Some(entry) => {
            // SAFETY: a map value pointer is valid for the program's run; a concurrent update can
            // at worst give a torn read of two integers, which the checks below tolerate.
            let entry = unsafe { *entry };
            // Also keeps the index in bounds for the per-tier arrays (a daemon bug must not make
            // the verifier-visible index unbounded).
            if now < entry.expires_ns && (entry.tier as usize) < TIER_COUNT {
                entry.tier
            } else {
                TIER_ANON
            }
        }
        None => TIER_ANON,
    }
}

/// Takes a token from `key`'s bucket for one new connection at `tier`. `true`: under the ceiling.
#[inline(always)]
pub fn admit(key: &IpKey, cfg: &KernelConfig, tier: u32, now: u64) -> bool {
    // Bounds the index for the verifier; `tier_of` already guarantees it.
    let t = if (tier as usize) < TIER_COUNT {
        tier as usize
    } else {
        0
    };
    let burst = cfg.ceiling_burst[t];
    let mut per_sec = cfg.ceiling_per_sec[t];
    if per_sec > MAX_PER_SEC {
        per_sec = MAX_PER_SEC;
    }
    match LIM_BUCKET.get_ptr_mut(key) {
        // SAFETY: valid map value pointer. Two CPUs updating one source's bucket at once may lose
        // a token's worth of accounting; the ceiling is a rate, not an exact count.
        Some(bucket) => unsafe { (*bucket).take(now, burst, per_sec) },
        None => {
            if burst == 0 {
                // A ceiling of zero admits nothing; no need to remember the source.
                return false;
            }
            // Fails open: if the insert fails the connection still passes.
            let _inserted = LIM_BUCKET.insert(key, Bucket::first(now, burst), 0);
            true
        }
    }
}

/// Sends one event for every `sample_every`-th over-ceiling drop on this CPU. A full ring buffer
/// loses the event, never the verdict.
#[inline(always)]
pub fn sample(cfg: &KernelConfig, pkt: &Packet) {
    let every = cfg.sample_every;
    if every == 0 {
        return;
    }
    let Some(left) = LIM_SAMPLER.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's slot of a per-CPU array (see `maps::count`).
    unsafe {
        // A countdown left over from a larger `sample_every` is cut short to the new one.
        if *left > 1 && *left <= every {
            *left -= 1;
            return;
        }
        *left = every;
    }
    // The key and tier are computed again only for the sampled few.
    let key = pkt.key(cfg.v6_prefix_len);
    let now = now_ns();
    let event = CeilingEvent {
        addr: key.bytes(),
        ts_ns: now,
        tier: tier_of(key.as_ip_key(), now),
        dport: pkt.dport as u32,
    };
    // Losing an event to a full ring buffer is accepted: events feed metrics and logs only.
    let _lost_when_full = LIM_EVENTS.output::<CeilingEvent>(&event, 0);
}
