//! Crafted Ethernet frames for the kernel tests: VLAN tags, IPv4 (with options and fragment
//! fields), IPv6 (with extension headers), TCP, UDP and ICMP, with valid checksums.
//!
//! ```
//! use limiter_tests::frames::{Frame, TCP_SYN};
//! let syn = Frame::tcp("192.0.2.7".parse().unwrap(), 443, TCP_SYN).vlan(0x8100, 10).build();
//! assert_eq!(syn.len(), 14 + 4 + 20 + 20);
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_PSH: u8 = 0x08;
pub const TCP_ACK: u8 = 0x10;

pub const ETH_P_IP: u16 = 0x0800;
pub const ETH_P_IPV6: u16 = 0x86dd;
pub const ETH_P_ARP: u16 = 0x0806;
pub const ETH_P_8021Q: u16 = 0x8100;
pub const ETH_P_8021AD: u16 = 0x88a8;

pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_ICMP: u8 = 1;
pub const IPPROTO_ICMPV6: u8 = 58;
pub const IPV6_HOPOPTS: u8 = 0;
pub const IPV6_ROUTING: u8 = 43;
pub const IPV6_FRAGMENT: u8 = 44;
pub const IPV6_DSTOPTS: u8 = 60;

/// Destination used when a test does not care: TEST-NET-1 and the documentation IPv6 prefix.
pub const DST_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
pub const DST_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);

/// The transport part of a frame.
#[derive(Clone, Debug)]
pub enum L4 {
    Tcp {
        sport: u16,
        dport: u16,
        flags: u8,
    },
    Udp {
        sport: u16,
        dport: u16,
    },
    /// ICMP echo request (ICMPv6 over IPv6).
    Icmp,
    /// Any protocol number with raw bytes after the IP header.
    Raw {
        proto: u8,
        bytes: Vec<u8>,
    },
}

/// A frame under construction; `build` renders the bytes.
#[derive(Clone, Debug)]
pub struct Frame {
    /// `(tpid, tci)` outermost first.
    vlans: Vec<(u16, u16)>,
    /// Overrides the final EtherType (e.g. ARP, or a protocol the program does not parse).
    ether_type: Option<u16>,
    src: IpAddr,
    dst: IpAddr,
    /// IPv4 options (padded to 4 bytes by `build`).
    v4_options: Vec<u8>,
    /// IPv4 `frag_off` field (flags and offset), host order.
    v4_frag: u16,
    /// IPv6 extension headers: `(kind, body length in bytes after the 2-byte prefix)`; the body is
    /// zero-filled and the length rounded to the 8-byte unit.
    v6_ext: Vec<(u8, usize)>,
    l4: L4,
    payload: Vec<u8>,
}

impl Frame {
    /// A TCP segment from `src` to `dport` on the default destination of the same family.
    pub fn tcp(src: IpAddr, dport: u16, flags: u8) -> Self {
        Self::new(
            src,
            L4::Tcp {
                sport: 40000,
                dport,
                flags,
            },
        )
    }

    pub fn udp(src: IpAddr, dport: u16) -> Self {
        Self::new(
            src,
            L4::Udp {
                sport: 40000,
                dport,
            },
        )
    }

    pub fn icmp(src: IpAddr) -> Self {
        Self::new(src, L4::Icmp)
    }

    pub fn new(src: IpAddr, l4: L4) -> Self {
        let dst = match src {
            IpAddr::V4(_) => IpAddr::V4(DST_V4),
            IpAddr::V6(_) => IpAddr::V6(DST_V6),
        };
        Self {
            vlans: Vec::new(),
            ether_type: None,
            src,
            dst,
            v4_options: Vec::new(),
            v4_frag: 0,
            v6_ext: Vec::new(),
            l4,
            payload: Vec::new(),
        }
    }

    /// Adds a VLAN tag inside the ones already added.
    pub fn vlan(mut self, tpid: u16, id: u16) -> Self {
        self.vlans.push((tpid, id & 0x0fff));
        self
    }

    pub fn ether_type(mut self, ether_type: u16) -> Self {
        self.ether_type = Some(ether_type);
        self
    }

    pub fn dst(mut self, dst: IpAddr) -> Self {
        self.dst = dst;
        self
    }

    /// IPv4 options bytes (IHL grows accordingly).
    pub fn v4_options(mut self, options: &[u8]) -> Self {
        self.v4_options = options.to_vec();
        self
    }

    /// IPv4 fragment: `offset` in 8-byte units, `more` sets MF.
    pub fn v4_fragment(mut self, offset: u16, more: bool) -> Self {
        self.v4_frag = (offset & 0x1fff) | if more { 0x2000 } else { 0 };
        self
    }

    /// IPv6 extension header of `kind` with `body` bytes after its 2-byte prefix (a fragment
    /// header always has 6).
    pub fn v6_ext(mut self, kind: u8, body: usize) -> Self {
        self.v6_ext.push((kind, body));
        self
    }

    pub fn payload(mut self, payload: &[u8]) -> Self {
        self.payload = payload.to_vec();
        self
    }

    pub fn build(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        out.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01]); // destination MAC
        out.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02]); // source MAC
                                                          // Layout: dst, src, [TPID TCI]*, EtherType: each TPID sits where an EtherType would.
        for (tpid, tci) in &self.vlans {
            out.extend_from_slice(&tpid.to_be_bytes());
            out.extend_from_slice(&tci.to_be_bytes());
        }
        let l4 = self.l4_bytes();
        let (default_type, l3) = match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => (ETH_P_IP, self.ipv4(s, d, &l4)),
            (IpAddr::V6(s), IpAddr::V6(d)) => (ETH_P_IPV6, self.ipv6(s, d, &l4)),
            _ => panic!("frame source and destination must be the same IP family"),
        };
        out.extend_from_slice(&self.ether_type.unwrap_or(default_type).to_be_bytes());
        out.extend_from_slice(&l3);
        out
    }

    fn proto(&self) -> u8 {
        match (&self.l4, self.src) {
            (L4::Tcp { .. }, _) => IPPROTO_TCP,
            (L4::Udp { .. }, _) => IPPROTO_UDP,
            (L4::Icmp, IpAddr::V4(_)) => IPPROTO_ICMP,
            (L4::Icmp, IpAddr::V6(_)) => IPPROTO_ICMPV6,
            (L4::Raw { proto, .. }, _) => *proto,
        }
    }

    /// The transport header and payload, checksum left zero (filled by the L3 builder, which
    /// knows the pseudo-header).
    fn l4_bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        match &self.l4 {
            L4::Tcp {
                sport,
                dport,
                flags,
            } => {
                b.extend_from_slice(&sport.to_be_bytes());
                b.extend_from_slice(&dport.to_be_bytes());
                b.extend_from_slice(&1u32.to_be_bytes()); // sequence
                let ack = if flags & TCP_ACK != 0 { 1u32 } else { 0 };
                b.extend_from_slice(&ack.to_be_bytes());
                b.push(5 << 4); // data offset: 20 bytes
                b.push(*flags);
                b.extend_from_slice(&64240u16.to_be_bytes()); // window
                b.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
            }
            L4::Udp { sport, dport } => {
                b.extend_from_slice(&sport.to_be_bytes());
                b.extend_from_slice(&dport.to_be_bytes());
                let len = (8 + self.payload.len()) as u16;
                b.extend_from_slice(&len.to_be_bytes());
                b.extend_from_slice(&[0, 0]);
            }
            L4::Icmp => {
                let kind = if self.src.is_ipv4() { 8 } else { 128 };
                b.extend_from_slice(&[kind, 0, 0, 0, 0x12, 0x34, 0, 1]);
            }
            L4::Raw { bytes, .. } => b.extend_from_slice(bytes),
        }
        b.extend_from_slice(&self.payload);
        b
    }

    /// Offset of the checksum field inside the transport header, if it has one we fill.
    fn l4_csum_at(&self) -> Option<usize> {
        match self.l4 {
            L4::Tcp { .. } => Some(16),
            L4::Udp { .. } => Some(6),
            L4::Icmp => Some(2),
            L4::Raw { .. } => None,
        }
    }

    fn ipv4(&self, src: Ipv4Addr, dst: Ipv4Addr, l4: &[u8]) -> Vec<u8> {
        let mut opts = self.v4_options.clone();
        while !opts.len().is_multiple_of(4) {
            opts.push(0); // end-of-options padding
        }
        assert!(opts.len() <= 40, "IPv4 options are at most 40 bytes");
        let hlen = 20 + opts.len();
        let total = (hlen + l4.len()) as u16;
        let mut h = vec![0x40 | (hlen / 4) as u8, 0];
        h.extend_from_slice(&total.to_be_bytes());
        h.extend_from_slice(&0x1234u16.to_be_bytes()); // identification
        h.extend_from_slice(&self.v4_frag.to_be_bytes());
        h.push(64);
        h.push(self.proto());
        h.extend_from_slice(&[0, 0]);
        h.extend_from_slice(&src.octets());
        h.extend_from_slice(&dst.octets());
        h.extend_from_slice(&opts);
        let c = checksum(&h, 0);
        h[10..12].copy_from_slice(&c.to_be_bytes());

        let mut l4 = l4.to_vec();
        if let Some(at) = self.l4_csum_at() {
            let seed = if matches!(self.l4, L4::Icmp) {
                0
            } else {
                pseudo_v4(src, dst, self.proto(), l4.len())
            };
            let c = checksum(&l4, seed);
            l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
        }
        h.extend_from_slice(&l4);
        h
    }

    fn ipv6(&self, src: Ipv6Addr, dst: Ipv6Addr, l4: &[u8]) -> Vec<u8> {
        let mut ext = Vec::new();
        let kinds: Vec<u8> = self.v6_ext.iter().map(|(k, _)| *k).collect();
        for (i, (kind, body)) in self.v6_ext.iter().enumerate() {
            let next = kinds.get(i + 1).copied().unwrap_or(self.proto());
            if *kind == IPV6_FRAGMENT {
                // Fixed 8 bytes: next, reserved, offset/flags (offset 0, M=1), identification.
                ext.extend_from_slice(&[next, 0, 0, 1, 0, 0, 0x12, 0x34]);
                continue;
            }
            let len = (2 + body).div_ceil(8) * 8;
            ext.push(next);
            ext.push((len / 8 - 1) as u8);
            ext.extend(std::iter::repeat_n(0u8, len - 2));
        }
        let first = kinds.first().copied().unwrap_or(self.proto());
        let mut l4 = l4.to_vec();
        if let Some(at) = self.l4_csum_at() {
            let c = checksum(&l4, pseudo_v6(src, dst, self.proto(), l4.len()));
            l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
        }
        let plen = (ext.len() + l4.len()) as u16;
        let mut h = vec![0x60, 0, 0, 0];
        h.extend_from_slice(&plen.to_be_bytes());
        h.push(first);
        h.push(64);
        h.extend_from_slice(&src.octets());
        h.extend_from_slice(&dst.octets());
        h.extend_from_slice(&ext);
        h.extend_from_slice(&l4);
        h
    }
}

fn sum16(bytes: &[u8], mut acc: u32) -> u32 {
    for pair in bytes.chunks(2) {
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        acc += word as u32;
    }
    acc
}

/// RFC 1071 checksum of `bytes`, starting from a partial sum `seed`.
fn checksum(bytes: &[u8], seed: u32) -> u16 {
    let mut acc = sum16(bytes, seed);
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: usize) -> u32 {
    let acc = sum16(&src.octets(), 0);
    let acc = sum16(&dst.octets(), acc);
    acc + proto as u32 + len as u32
}

fn pseudo_v6(src: Ipv6Addr, dst: Ipv6Addr, proto: u8, len: usize) -> u32 {
    let acc = sum16(&src.octets(), 0);
    let acc = sum16(&dst.octets(), acc);
    acc + proto as u32 + (len as u32 >> 16) + (len as u32 & 0xffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_header_checksum_verifies() {
        let f = Frame::tcp("192.0.2.7".parse().unwrap(), 80, TCP_SYN)
            .v4_options(&[1, 1, 1])
            .build();
        assert_eq!(&f[12..14], &ETH_P_IP.to_be_bytes());
        assert_eq!(f[14], 0x46, "IHL 6 for 3 option bytes padded to 4");
        assert_eq!(checksum(&f[14..38], 0), 0);
    }

    #[test]
    fn vlan_tags_nest_outermost_first() {
        let f = Frame::udp("2001:db8::1".parse().unwrap(), 53)
            .vlan(ETH_P_8021AD, 100)
            .vlan(ETH_P_8021Q, 200)
            .build();
        assert_eq!(&f[12..14], &ETH_P_8021AD.to_be_bytes());
        assert_eq!(&f[14..16], &100u16.to_be_bytes());
        assert_eq!(&f[16..18], &ETH_P_8021Q.to_be_bytes());
        assert_eq!(&f[18..20], &200u16.to_be_bytes());
        assert_eq!(&f[20..22], &ETH_P_IPV6.to_be_bytes());
        assert_eq!(f.len(), 22 + 40 + 8);
    }

    #[test]
    fn tcp_checksum_verifies_over_pseudo_header() {
        let src: Ipv6Addr = "2001:db8::5".parse().unwrap();
        let f = Frame::tcp(IpAddr::V6(src), 443, TCP_SYN | TCP_ACK)
            .v6_ext(IPV6_DSTOPTS, 6)
            .build();
        let tcp = &f[14 + 40 + 8..];
        assert_eq!(tcp.len(), 20);
        assert_eq!(f[14 + 6], IPV6_DSTOPTS);
        assert_eq!(f[14 + 40], IPPROTO_TCP);
        assert_eq!(checksum(tcp, pseudo_v6(src, DST_V6, IPPROTO_TCP, 20)), 0);
    }
}
