//! Header parsing: Ethernet, up to two VLAN tags, IPv4 (options skipped by `ihl`), IPv6 (hop-by-hop,
//! routing and destination-options headers walked), TCP. Yields the few facts the decision needs,
//! or the pass counter of a frame the program cannot judge: the kernel never drops what it cannot
//! parse.
//!
//! Fields are read with single unaligned loads (the crate is built with
//! `+allows-misaligned-mem-access`; the verifier allows misaligned *packet* reads on this
//! architecture), so an address costs one or two loads rather than one per byte.

use limiter_common::{key::mask_v6_halves, verdict};

use crate::key::{HashKey, LpmKey};

const ETH_HLEN: usize = 14;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
const VLAN_HLEN: usize = 4;

const IPV4_MIN_HLEN: usize = 20;
/// More-fragments flag and fragment offset of the IPv4 `frag_off` field.
const IPV4_MF_OR_OFFSET: u16 = 0x3fff;
const IPV6_HLEN: usize = 40;
const IPPROTO_TCP: u8 = 6;
const IPV6_HOPOPTS: u8 = 0;
const IPV6_ROUTING: u8 = 43;
const IPV6_FRAGMENT: u8 = 44;
const IPV6_DSTOPTS: u8 = 60;
/// Extension headers walked before giving up on an IPv6 packet. Bounded so the verifier sees a
/// finite loop; a legitimate SYN carries none, and one with more than this passes as malformed.
const IPV6_MAX_EXT: usize = 4;

const TCP_MIN_HLEN: usize = 20;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;

/// Bytes 8..16 of `::ffff:a.b.c.d` before the IPv4 address: `00 00 ff ff`.
const V4_MAPPED_LO: u64 = 0x0000_ffff_0000_0000;

/// What the decision needs to know about a parsed IP packet.
pub struct Packet {
    /// Full source address as big-endian halves (bytes 0..8, 8..16); IPv4 as `::ffff:a.b.c.d`.
    /// Not masked: the LPM lists match the whole address, the hash maps mask it.
    pub src_hi: u64,
    pub src_lo: u64,
    /// The source is a native IPv6 address, keyed by its prefix. False for IPv4 and for an IPv6
    /// packet from a v4-mapped address, which is keyed as that IPv4 address (else every mapped
    /// source would mask to the same `::/64` key).
    pub v6: bool,
    /// The packet is TCP with a complete header; `dport` and `syn_only` are only meaningful then.
    pub tcp: bool,
    pub dport: u16,
    /// SYN set and ACK clear: a new connection attempt.
    pub syn_only: bool,
}

impl Packet {
    /// Key of the hash maps (lockout, tier, bucket): IPv4 as is (already mapped), IPv6 masked to
    /// `v6_prefix_len`.
    #[inline(always)]
    pub fn key(&self, v6_prefix_len: u32) -> HashKey {
        if self.v6 {
            let (hi, lo) = mask_v6_halves(self.src_hi, self.src_lo, v6_prefix_len);
            HashKey::new(hi, lo)
        } else {
            HashKey::new(self.src_hi, self.src_lo)
        }
    }

    /// Key of the allow and deny tries: the whole address.
    #[inline(always)]
    pub fn cidr_key(&self) -> LpmKey {
        LpmKey::host(self.src_hi, self.src_lo)
    }
}

/// Checks that `len` bytes at `offset` lie inside the frame; returns their address.
#[inline(always)]
fn check(start: usize, end: usize, offset: usize, len: usize) -> Result<usize, u32> {
    // Verifier: every packet read must be dominated by a comparison of its last byte with
    // `data_end`; all reads below happen inside a range checked here.
    if start + offset + len > end {
        return Err(verdict::PASS_MALFORMED);
    }
    Ok(start + offset)
}

/// Reads a `T` at `at`, which must lie inside a range `check` accepted.
#[inline(always)]
fn read<T: Copy>(at: usize) -> T {
    // SAFETY: callers pass addresses inside a checked range; unaligned reads are allowed.
    unsafe { (at as *const T).read_unaligned() }
}

#[inline(always)]
fn read_be16(at: usize) -> u16 {
    u16::from_be(read::<u16>(at))
}

/// Parses the frame between `start` and `end` (the context's `data` and `data_end`).
/// `Err` carries the counter to bump for a frame that passes unjudged.
#[inline(always)]
pub fn parse(start: usize, end: usize) -> Result<Packet, u32> {
    let eth = check(start, end, 0, ETH_HLEN)?;
    let mut proto = read_be16(eth + 12);
    let mut off = ETH_HLEN;
    // Up to two tags (802.1Q, or 802.1ad outer + 802.1Q inner), unrolled.
    if proto == ETH_P_8021Q || proto == ETH_P_8021AD {
        let tag = check(start, end, off, VLAN_HLEN)?;
        proto = read_be16(tag + 2);
        off += VLAN_HLEN;
        if proto == ETH_P_8021Q || proto == ETH_P_8021AD {
            let tag = check(start, end, off, VLAN_HLEN)?;
            proto = read_be16(tag + 2);
            off += VLAN_HLEN;
        }
    }
    match proto {
        ETH_P_IP => parse_v4(start, end, off),
        ETH_P_IPV6 => parse_v6(start, end, off),
        // Includes a third VLAN tag: not ours to judge.
        _ => Err(verdict::PASS_NON_IP),
    }
}

#[inline(always)]
fn parse_v4(start: usize, end: usize, off: usize) -> Result<Packet, u32> {
    let ip = check(start, end, off, IPV4_MIN_HLEN)?;
    let vihl = read::<u8>(ip);
    if vihl >> 4 != 4 {
        return Err(verdict::PASS_MALFORMED);
    }
    // Masked to 4 bits, so the verifier knows the header is at most 60 bytes long.
    let ihl = (vihl & 0x0f) as usize * 4;
    if ihl < IPV4_MIN_HLEN {
        return Err(verdict::PASS_MALFORMED);
    }
    if read_be16(ip + 6) & IPV4_MF_OR_OFFSET != 0 {
        return Err(verdict::PASS_FRAGMENT);
    }
    // The options must be there too, even for a protocol whose header is never read.
    check(start, end, off, ihl)?;
    let src = u32::from_be(read::<u32>(ip + 12)) as u64;
    let proto = read::<u8>(ip + 9);
    with_l4(start, end, off + ihl, proto, 0, V4_MAPPED_LO | src, false)
}

#[inline(always)]
fn parse_v6(start: usize, end: usize, off: usize) -> Result<Packet, u32> {
    let ip = check(start, end, off, IPV6_HLEN)?;
    if read::<u8>(ip) >> 4 != 6 {
        return Err(verdict::PASS_MALFORMED);
    }
    let hi = u64::from_be(read::<u64>(ip + 8));
    let lo = u64::from_be(read::<u64>(ip + 16));
    let mut next = read::<u8>(ip + 6);
    let mut l4 = off + IPV6_HLEN;
    let mut walked = 0;
    // Bounded loop (the verifier needs a bound): an attacker could otherwise hide a SYN behind
    // extension headers the program did not walk.
    while walked < IPV6_MAX_EXT {
        match next {
            IPV6_FRAGMENT => return Err(verdict::PASS_FRAGMENT),
            IPV6_HOPOPTS | IPV6_ROUTING | IPV6_DSTOPTS => {
                let ext = check(start, end, l4, 2)?;
                next = read::<u8>(ext);
                // Length in 8-octet units, not counting the first: at most 2 KiB per header,
                // which keeps the offset's range small enough for the verifier.
                l4 += (read::<u8>(ext + 1) as usize + 1) * 8;
            }
            _ => break,
        }
        walked += 1;
    }
    match next {
        IPV6_FRAGMENT => Err(verdict::PASS_FRAGMENT),
        IPV6_HOPOPTS | IPV6_ROUTING | IPV6_DSTOPTS => Err(verdict::PASS_MALFORMED),
        _ => {
            let native = !(hi == 0 && lo >> 32 == V4_MAPPED_LO >> 32);
            with_l4(start, end, l4, next, hi, lo, native)
        }
    }
}

#[inline(always)]
fn with_l4(
    start: usize,
    end: usize,
    l4: usize,
    proto: u8,
    src_hi: u64,
    src_lo: u64,
    v6: bool,
) -> Result<Packet, u32> {
    if proto != IPPROTO_TCP {
        return Ok(Packet {
            src_hi,
            src_lo,
            v6,
            tcp: false,
            dport: 0,
            syn_only: false,
        });
    }
    let tcp = check(start, end, l4, TCP_MIN_HLEN)?;
    if read::<u8>(tcp + 12) >> 4 < 5 {
        return Err(verdict::PASS_MALFORMED);
    }
    let flags = read::<u8>(tcp + 13);
    Ok(Packet {
        src_hi,
        src_lo,
        v6,
        tcp: true,
        dport: read_be16(tcp + 2),
        syn_only: flags & (TCP_SYN | TCP_ACK) == TCP_SYN,
    })
}
