//! Header parsing: Ethernet, up to two VLAN tags, IPv4 (options skipped by `ihl`), IPv6 (hop-by-hop,
//! routing and destination-options headers walked), TCP. Yields the few facts the decision needs,
//! or the pass counter of a frame the program cannot judge: the kernel never drops what it cannot
//! parse.

use core::mem::size_of;

use limiter_common::{verdict, IpKey};

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

/// What the decision needs to know about a parsed IP packet.
pub struct Packet {
    /// Full source address in network order; IPv4 as `::ffff:a.b.c.d`. Not masked: the LPM lists
    /// match the whole address, the hash maps mask it to the configured IPv6 prefix.
    pub src: [u8; 16],
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
    pub fn key(&self, v6_prefix_len: u32) -> IpKey {
        if self.v6 {
            IpKey::from_v6(self.src, v6_prefix_len)
        } else {
            IpKey { addr: self.src }
        }
    }
}

/// Returns a pointer to a `T` at `offset` from the frame's start, or `PASS_MALFORMED` when the frame
/// is too short to hold it.
#[inline(always)]
fn ptr_at<T>(start: usize, end: usize, offset: usize) -> Result<*const T, u32> {
    // Verifier: every packet read must be dominated by a comparison of its last byte with
    // `data_end`; this is the only place the program reads packet memory from.
    if start + offset + size_of::<T>() > end {
        return Err(verdict::PASS_MALFORMED);
    }
    Ok((start + offset) as *const T)
}

/// Reads `N` bytes at `offset`. Byte arrays have alignment 1, so this never assumes the packet is
/// aligned (IP headers sit at offset 14).
#[inline(always)]
fn bytes_at<const N: usize>(start: usize, end: usize, offset: usize) -> Result<[u8; N], u32> {
    let p = ptr_at::<[u8; N]>(start, end, offset)?;
    // SAFETY: `ptr_at` checked that all N bytes lie inside the frame.
    Ok(unsafe { p.read() })
}

#[inline(always)]
fn be16(hi: u8, lo: u8) -> u16 {
    u16::from_be_bytes([hi, lo])
}

/// Parses the frame between `start` and `end` (the context's `data` and `data_end`).
/// `Err` carries the counter to bump for a frame that passes unjudged.
#[inline(always)]
pub fn parse(start: usize, end: usize) -> Result<Packet, u32> {
    let eth = bytes_at::<ETH_HLEN>(start, end, 0)?;
    let mut proto = be16(eth[12], eth[13]);
    let mut off = ETH_HLEN;
    // Up to two tags (802.1Q, or 802.1ad outer + 802.1Q inner), unrolled.
    if proto == ETH_P_8021Q || proto == ETH_P_8021AD {
        let tag = bytes_at::<VLAN_HLEN>(start, end, off)?;
        proto = be16(tag[2], tag[3]);
        off += VLAN_HLEN;
        if proto == ETH_P_8021Q || proto == ETH_P_8021AD {
            let tag = bytes_at::<VLAN_HLEN>(start, end, off)?;
            proto = be16(tag[2], tag[3]);
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
    let ip = bytes_at::<IPV4_MIN_HLEN>(start, end, off)?;
    if ip[0] >> 4 != 4 {
        return Err(verdict::PASS_MALFORMED);
    }
    // Masked to 4 bits, so the verifier knows the header is at most 60 bytes long.
    let ihl = (ip[0] & 0x0f) as usize * 4;
    if ihl < IPV4_MIN_HLEN {
        return Err(verdict::PASS_MALFORMED);
    }
    if be16(ip[6], ip[7]) & IPV4_MF_OR_OFFSET != 0 {
        return Err(verdict::PASS_FRAGMENT);
    }
    let l4 = off + ihl;
    // The options must be there too, even for a protocol whose header is never read.
    if start + l4 > end {
        return Err(verdict::PASS_MALFORMED);
    }
    let src = [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ip[12], ip[13], ip[14], ip[15],
    ];
    with_l4(start, end, l4, ip[9], src, false)
}

#[inline(always)]
fn parse_v6(start: usize, end: usize, off: usize) -> Result<Packet, u32> {
    let ip = bytes_at::<IPV6_HLEN>(start, end, off)?;
    if ip[0] >> 4 != 6 {
        return Err(verdict::PASS_MALFORMED);
    }
    let mut src = [0u8; 16];
    src.copy_from_slice(&ip[8..24]);
    let mut next = ip[6];
    let mut l4 = off + IPV6_HLEN;
    let mut walked = 0;
    // Bounded loop (the verifier needs a bound): an attacker could otherwise hide a SYN behind
    // extension headers the program did not walk.
    while walked < IPV6_MAX_EXT {
        match next {
            IPV6_FRAGMENT => return Err(verdict::PASS_FRAGMENT),
            IPV6_HOPOPTS | IPV6_ROUTING | IPV6_DSTOPTS => {
                let ext = bytes_at::<2>(start, end, l4)?;
                next = ext[0];
                // Length in 8-octet units, not counting the first: at most 2 KiB per header,
                // which keeps the offset's range small enough for the verifier.
                l4 += (ext[1] as usize + 1) * 8;
            }
            _ => break,
        }
        walked += 1;
    }
    match next {
        IPV6_FRAGMENT => Err(verdict::PASS_FRAGMENT),
        IPV6_HOPOPTS | IPV6_ROUTING | IPV6_DSTOPTS => Err(verdict::PASS_MALFORMED),
        _ => {
            let native = !is_v4_mapped(&src);
            with_l4(start, end, l4, next, src, native)
        }
    }
}

#[inline(always)]
fn is_v4_mapped(a: &[u8; 16]) -> bool {
    a[..10].iter().all(|b| *b == 0) && a[10] == 0xff && a[11] == 0xff
}

#[inline(always)]
fn with_l4(
    start: usize,
    end: usize,
    l4: usize,
    proto: u8,
    src: [u8; 16],
    v6: bool,
) -> Result<Packet, u32> {
    if proto != IPPROTO_TCP {
        return Ok(Packet {
            src,
            v6,
            tcp: false,
            dport: 0,
            syn_only: false,
        });
    }
    let tcp = bytes_at::<TCP_MIN_HLEN>(start, end, l4)?;
    if tcp[12] >> 4 < 5 {
        return Err(verdict::PASS_MALFORMED);
    }
    let flags = tcp[13];
    Ok(Packet {
        src,
        v6,
        tcp: true,
        dport: be16(tcp[2], tcp[3]),
        syn_only: flags & (TCP_SYN | TCP_ACK) == TCP_SYN,
    })
}
