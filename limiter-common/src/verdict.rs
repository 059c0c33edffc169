//! Verdict counter indices: every packet the program sees increments exactly one of these.

/// Not IPv4/IPv6 (ARP, LLDP, more than two VLAN tags…).
pub const PASS_NON_IP: u32 = 0;
/// Truncated or malformed headers: the kernel never drops what it cannot judge.
pub const PASS_MALFORMED: u32 = 1;
/// IPv4 fragment or IPv6 fragment header.
pub const PASS_FRAGMENT: u32 = 2;
/// Nothing to judge: not TCP, or TCP to a port that is not protected (and locks are not widened).
pub const PASS_UNPROTECTED: u32 = 3;
/// Source is in the allow-list.
pub const PASS_ALLOWED: u32 = 4;
/// Source is locked out.
pub const DROP_LOCKED: u32 = 5;
/// Source is in the deny-list.
pub const DROP_DENIED: u32 = 6;
/// New connection (SYN without ACK) under the source's ceiling.
pub const PASS_SYN: u32 = 7;
/// New connection over the source's ceiling.
pub const DROP_CEILING: u32 = 8;
/// Any other packet from a clean source to a protected port (established traffic).
pub const PASS_CLEAN: u32 = 9;

pub const COUNT: u32 = 10;

/// Names in index order, as used in `kernel status` and metrics labels.
pub const NAMES: [&str; COUNT as usize] = [
    "pass_non_ip",
    "pass_malformed",
    "pass_fragment",
    "pass_unprotected",
    "pass_allowed",
    "drop_locked",
    "drop_denied",
    "pass_syn",
    "drop_ceiling",
    "pass_clean",
];
