//! The SYN frames the sender writes: Ethernet + IPv4 + TCP with valid checksums, because the
//! receiver's stack (filters (b) and (c)) verifies both before a hook or a socket sees them.

use std::net::Ipv4Addr;

/// Ethernet (14) + IPv4 (20) + TCP (20).
pub const SYN_LEN: usize = 54;

/// Where a frame goes: the receiver's MAC, address and protected port.
#[derive(Clone, Copy, Debug)]
pub struct Dest {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub ip: Ipv4Addr,
    pub port: u16,
}

/// The ones' complement sum folded to 16 bits, over `parts` read as big-endian words.
fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum: u32 = 0;
    for part in parts {
        let mut chunks = part.chunks_exact(2);
        for c in &mut chunks {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        if let [last] = chunks.remainder() {
            sum += u32::from(*last) << 8;
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A TCP SYN from `src:sport` to `to`, sequence number `seq`.
pub fn syn(src: Ipv4Addr, sport: u16, seq: u32, to: &Dest) -> [u8; SYN_LEN] {
    let mut f = [0u8; SYN_LEN];
    f[0..6].copy_from_slice(&to.dst_mac);
    f[6..12].copy_from_slice(&to.src_mac);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&40u16.to_be_bytes());
    ip[6] = 0x40; // DF, as a real stack sends a SYN
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&to.ip.octets());
    let ip_sum = checksum(&[ip]);
    ip[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    let tcp = &mut f[34..54];
    tcp[0..2].copy_from_slice(&sport.to_be_bytes());
    tcp[2..4].copy_from_slice(&to.port.to_be_bytes());
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    tcp[12] = 0x50;
    tcp[13] = 0x02;
    tcp[14..16].copy_from_slice(&64240u16.to_be_bytes());
    let mut pseudo = [0u8; 12];
    pseudo[0..4].copy_from_slice(&src.octets());
    pseudo[4..8].copy_from_slice(&to.ip.octets());
    pseudo[9] = 6;
    pseudo[10..12].copy_from_slice(&20u16.to_be_bytes());
    let tcp_sum = checksum(&[&pseudo, &f[34..54]]);
    f[50..52].copy_from_slice(&tcp_sum.to_be_bytes());
    f
}

/// One SYN per source, each a new connection attempt (source ports and sequence numbers vary).
pub fn syns(sources: &[Ipv4Addr], to: &Dest) -> Vec<[u8; SYN_LEN]> {
    sources
        .iter()
        .enumerate()
        .map(|(i, s)| syn(*s, 1024 + (i % 60000) as u16, i as u32 * 7919, to))
        .collect()
}

/// The index of interface `name` in the calling thread's namespace (0: none).
pub fn ifindex(name: &str) -> u32 {
    let Ok(name) = std::ffi::CString::new(name) else {
        return 0;
    };
    // SAFETY: `name` is a valid C string.
    unsafe { libc::if_nametoindex(name.as_ptr()) }
}
