//! The 16-byte source key: IPv4 as `::ffff:a.b.c.d`, IPv6 masked to the configured prefix.

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct IpKey {
    /// Network byte order.
    pub addr: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<IpKey>() == 16);

impl IpKey {
    /// `addr` is the IPv4 address in network byte order, as it sits in the packet.
    #[inline(always)]
    pub fn from_v4(addr: [u8; 4]) -> Self {
        Self {
            addr: [
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, addr[0], addr[1], addr[2], addr[3],
            ],
        }
    }

    /// IPv6 address masked to `prefix_len` bits (clamped to 0..=128).
    #[inline(always)]
    pub fn from_v6(addr: [u8; 16], prefix_len: u32) -> Self {
        let hi = u64::from_be_bytes([
            addr[0], addr[1], addr[2], addr[3], addr[4], addr[5], addr[6], addr[7],
        ]);
        let lo = u64::from_be_bytes([
            addr[8], addr[9], addr[10], addr[11], addr[12], addr[13], addr[14], addr[15],
        ]);
        let (hi, lo) = mask_v6_halves(hi, lo, prefix_len);
        let h = hi.to_be_bytes();
        let l = lo.to_be_bytes();
        Self {
            addr: [
                h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], l[0], l[1], l[2], l[3], l[4], l[5],
                l[6], l[7],
            ],
        }
    }

    /// True for `::ffff:a.b.c.d`.
    pub fn is_v4_mapped(&self) -> bool {
        self.addr[..10].iter().all(|b| *b == 0) && self.addr[10] == 0xff && self.addr[11] == 0xff
    }
}

/// Masks an IPv6 address, given as its two big-endian halves (bytes 0..8 and 8..16 read as
/// `u64::from_be_bytes`), to `prefix_len` bits (clamped to 0..=128). The kernel program works on
/// the halves directly; [`IpKey::from_v6`] is the byte-array form.
#[inline(always)]
pub fn mask_v6_halves(mut hi: u64, mut lo: u64, prefix_len: u32) -> (u64, u64) {
    // Branches instead of one 128-bit shift: BPF has no 128-bit arithmetic.
    if prefix_len == 0 {
        hi = 0;
        lo = 0;
    } else if prefix_len < 64 {
        hi &= !0u64 << (64 - prefix_len);
        lo = 0;
    } else if prefix_len == 64 {
        lo = 0;
    } else if prefix_len < 128 {
        lo &= !0u64 << (128 - prefix_len);
    }
    (hi, lo)
}

/// Prefix length of an IPv4 CIDR inside the 128-bit LPM key space.
pub const fn v4_prefix_in_v6(prefix_len: u32) -> u32 {
    96 + prefix_len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_is_mapped() {
        let k = IpKey::from_v4([192, 0, 2, 7]);
        assert_eq!(&k.addr[10..], &[0xff, 0xff, 192, 0, 2, 7]);
        assert!(k.is_v4_mapped());
    }

    #[test]
    fn v6_masks_to_prefix() {
        let a = [
            0x20, 0x01, 0x0d, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
        ];
        assert_eq!(IpKey::from_v6(a, 64).addr[8..], [0; 8]);
        assert_eq!(IpKey::from_v6(a, 64).addr[..8], a[..8]);
        assert_eq!(IpKey::from_v6(a, 128).addr, a);
        assert_eq!(IpKey::from_v6(a, 0).addr, [0; 16]);
        let k48 = IpKey::from_v6(a, 48);
        assert_eq!(k48.addr[..6], a[..6]);
        assert_eq!(k48.addr[6..], [0; 10]);
        let k100 = IpKey::from_v6(a, 100);
        assert_eq!(k100.addr[..12], a[..12]);
        assert_eq!(k100.addr[12], a[12] & 0xf0);
        assert_eq!(k100.addr[13..], [0; 3]);
        assert!(!IpKey::from_v6(a, 64).is_v4_mapped());
    }
}
