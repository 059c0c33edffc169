//! Map names, capacities and value layouts of the kernel program's maps.
//!
//! The eBPF statics are named exactly like the `MAP_*` constants (aya looks maps up by the
//! symbol name), and a daemon test checks that every constant names a map in the built object.

/// Single-entry array holding [`crate::KernelConfig`].
pub const MAP_CONFIG: &str = "LIM_CONFIG";
/// Array indexed by TCP destination port; non-zero marks a protected port.
pub const MAP_PORTS: &str = "LIM_PORTS";
/// LPM trie of allowed CIDRs (`Key<[u8; 16]>` → `u32`, value unused but non-zero).
pub const MAP_ALLOW: &str = "LIM_ALLOW";
/// LPM trie of denied CIDRs (`Key<[u8; 16]>` → [`DenyEntry`]).
pub const MAP_DENY: &str = "LIM_DENY";
/// Plain hash (never LRU, so a spoofed flood cannot evict a ban): [`crate::IpKey`] → [`Lockout`].
pub const MAP_LOCKOUT: &str = "LIM_LOCKOUT";
/// Direct-mapped array of [`crate::LockoutSlot`]s in front of [`MAP_LOCKOUT`], indexed by
/// [`crate::lockout_cache::lockout_slot`] (see [`crate::lockout_cache`] for its invariant).
pub const MAP_LOCKOUT_CACHE: &str = "LIM_LOCKOUT_CACHE";
/// LRU hash written by the daemon when an IP shows a verified credential: [`crate::IpKey`] → [`TierEntry`].
pub const MAP_TIER: &str = "LIM_TIER";
/// LRU hash of connection-ceiling token buckets: [`crate::IpKey`] → [`crate::Bucket`].
pub const MAP_BUCKET: &str = "LIM_BUCKET";
/// Per-CPU array of verdict counters, indexed by [`crate::verdict`] constants.
pub const MAP_COUNTERS: &str = "LIM_COUNTERS";
/// Ring buffer of sampled [`CeilingEvent`]s.
pub const MAP_EVENTS: &str = "LIM_EVENTS";

/// Every map the program defines, for pinning and for checks that the object is complete.
pub const ALL_MAPS: [&str; 10] = [
    MAP_CONFIG,
    MAP_PORTS,
    MAP_ALLOW,
    MAP_DENY,
    MAP_LOCKOUT,
    MAP_LOCKOUT_CACHE,
    MAP_TIER,
    MAP_BUCKET,
    MAP_COUNTERS,
    MAP_EVENTS,
];

/// Name of the `#[xdp]` entry point.
pub const PROG_XDP: &str = "limiter_xdp";
/// Name of the `#[classifier]` entry point.
pub const PROG_TC: &str = "limiter_tc";
/// Name of an `#[xdp]` program that only returns `XDP_PASS`: the benchmark's baseline, never
/// attached by the daemon.
pub const PROG_BENCH_PASS: &str = "limiter_bench_pass";

/// Value type of [`MAP_PORTS`]: non-zero marks a protected TCP destination port.
pub type PortMark = u32;
/// Value type of [`MAP_ALLOW`]: only presence matters; write 1.
pub type AllowMark = u32;
/// Value type of [`MAP_COUNTERS`] (one per CPU; sum them for a total).
pub type Counter = u64;
/// Key type of [`MAP_ALLOW`] and [`MAP_DENY`] data: the full 16-byte source address (IPv4 as
/// `::ffff:a.b.c.d`, IPv6 *not* masked, so a CIDR longer than the v6 prefix still matches).
pub type CidrBytes = [u8; 16];

pub const PORTS_CAPACITY: u32 = 65536;
pub const ALLOW_CAPACITY: u32 = 16384;
pub const DENY_CAPACITY: u32 = 16384;
pub const LOCKOUT_CAPACITY: u32 = 262_144;
/// Slots of [`MAP_LOCKOUT_CACHE`]: a power of two (the slot index is the top bits of a hash),
/// 32 bytes each, 8 MiB preallocated.
pub const LOCKOUT_CACHE_SLOTS: u32 = 1 << crate::lockout_cache::LOCKOUT_CACHE_BITS;
pub const TIER_CAPACITY: u32 = 65536;
pub const BUCKET_CAPACITY: u32 = 262_144;
pub const EVENTS_BYTES: u32 = 256 * 1024;

/// A lockout: packets from the IP are dropped while the kernel clock is before `deadline_ns`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lockout {
    /// `CLOCK_BOOTTIME` nanoseconds (what `bpf_ktime_get_boot_ns` reads).
    pub deadline_ns: u64,
    /// Escalation level (1 for the first lockout, doubling the duration each step).
    pub level: u32,
    pub _reserved: u32,
}
const _: () = assert!(core::mem::size_of::<Lockout>() == 16);

/// A denied CIDR; `deadline_ns == 0` means no expiry.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DenyEntry {
    pub deadline_ns: u64,
}
const _: () = assert!(core::mem::size_of::<DenyEntry>() == 8);

/// Tier the daemon has verified for an IP, valid until `expires_ns` (`CLOCK_BOOTTIME`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierEntry {
    pub expires_ns: u64,
    /// One of the `TIER_*` constants in [`crate::config`].
    pub tier: u32,
    pub _reserved: u32,
}
const _: () = assert!(core::mem::size_of::<TierEntry>() == 16);

/// A sampled SYN over the connection ceiling, for metrics and logs only (SYNs are spoofable).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CeilingEvent {
    pub addr: [u8; 16],
    pub ts_ns: u64,
    pub tier: u32,
    pub dport: u32,
}
const _: () = assert!(core::mem::size_of::<CeilingEvent>() == 32);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: each type is repr(C), integer-only and has no padding (sizes asserted above).
    unsafe impl aya::Pod for super::Lockout {}
    unsafe impl aya::Pod for crate::LockoutSlot {}
    unsafe impl aya::Pod for super::DenyEntry {}
    unsafe impl aya::Pod for super::TierEntry {}
    unsafe impl aya::Pod for super::CeilingEvent {}
    unsafe impl aya::Pod for crate::Bucket {}
    unsafe impl aya::Pod for crate::KernelConfig {}
    unsafe impl aya::Pod for crate::IpKey {}
}
