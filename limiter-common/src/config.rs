//! The kernel program's runtime configuration, written by the daemon into [`crate::maps::MAP_CONFIG`].

pub const TIER_ANON: u32 = 0;
pub const TIER_SESSION: u32 = 1;
pub const TIER_SPONSOR: u32 = 2;
/// A verified crawler (published ranges or forward-confirmed reverse DNS). Last, so the older
/// rungs keep their indexes.
pub const TIER_CRAWLER: u32 = 3;
/// A verified signed agent (Web Bot Auth), pushed for the address it called from.
pub const TIER_AGENT: u32 = 4;
pub const TIER_COUNT: usize = 5;

/// Lockouts and deny entries drop every packet from the source, not only those to protected ports.
pub const FLAG_LOCK_ALL_PORTS: u32 = 1;
/// The allow-list has entries; when clear the program skips the trie lookup entirely.
pub const FLAG_HAS_ALLOW: u32 = 1 << 1;
/// The deny-list has entries; when clear the program skips the trie lookup entirely.
pub const FLAG_HAS_DENY: u32 = 1 << 2;

/// Largest accepted refill rate; keeps `elapsed_ns × per_sec` inside a `u64` (see [`crate::bucket`]).
pub const MAX_PER_SEC: u32 = 1_000_000;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelConfig {
    /// Connection-ceiling bucket capacity (SYNs) per tier, indexed by `TIER_*`.
    pub ceiling_burst: [u32; TIER_COUNT],
    /// Connection-ceiling refill rate (SYNs per second) per tier.
    pub ceiling_per_sec: [u32; TIER_COUNT],
    /// IPv6 sources are masked to this prefix before any lookup (1..=128).
    pub v6_prefix_len: u32,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// One over-ceiling event in this many goes to the ring buffer; 0 disables events.
    pub sample_every: u32,
    pub _reserved: u32,
}
const _: () = assert!(core::mem::size_of::<KernelConfig>() == 56);

impl KernelConfig {
    /// Used by the program only when the daemon has not written a config yet (a zeroed entry).
    pub const DEFAULT: Self = Self {
        // Indexed by `TIER_*`: anon, session, sponsor, crawler (a crawler's like a session's),
        // agent (between session and sponsor, like its budgets).
        ceiling_burst: [60, 200, 1000, 200, 500],
        ceiling_per_sec: [10, 50, 200, 50, 100],
        v6_prefix_len: 64,
        flags: 0,
        sample_every: 64,
        _reserved: 0,
    };
}

impl Default for KernelConfig {
    /// [`KernelConfig::DEFAULT`].
    fn default() -> Self {
        Self::DEFAULT
    }
}
