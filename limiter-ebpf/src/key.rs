//! Map keys built on the stack in shapes the verifier and the JIT handle well: 8-byte aligned, so
//! they are written with two 64-bit stores (the verifier rejects misaligned stack access, and the
//! common `IpKey`/`Key<[u8; 16]>` types have alignment 1).

use aya_ebpf::maps::lpm_trie::Key;
use limiter_common::{maps::CidrBytes, IpKey};

/// Byte-for-byte an [`IpKey`] (16 bytes, network order), aligned to 8.
#[repr(C, align(8))]
pub struct HashKey {
    /// Bytes 0..8 and 8..16, each stored in network order.
    words: [u64; 2],
}
const _: () = assert!(core::mem::size_of::<HashKey>() == core::mem::size_of::<IpKey>());

impl HashKey {
    /// From the address's big-endian halves (`u64::from_be_bytes` of bytes 0..8 and 8..16).
    #[inline(always)]
    pub fn new(hi: u64, lo: u64) -> Self {
        Self {
            words: [hi.to_be(), lo.to_be()],
        }
    }

    /// Bytes 0..8 and 8..16 as native (little-endian on bpfel) words: the halves
    /// `limiter_common::lockout_cache::lockout_slot_halves` takes, and what a slot's key holds.
    #[inline(always)]
    pub fn words(&self) -> [u64; 2] {
        self.words
    }

    #[inline(always)]
    pub fn as_ip_key(&self) -> &IpKey {
        // SAFETY: same size, every bit pattern is a valid IpKey, and HashKey's alignment (8)
        // satisfies IpKey's (1).
        unsafe { &*(self as *const Self).cast::<IpKey>() }
    }

    /// The 16 key bytes, for an event record.
    #[inline(always)]
    pub fn bytes(&self) -> [u8; 16] {
        self.as_ip_key().addr
    }
}

/// An LPM trie `Key<[u8; 16]>` (4-byte prefix length, then 16 address bytes) laid out so the
/// address starts on an 8-byte boundary: the padding word in front shifts the prefix length to
/// offset 4, and the key handed to the helper starts there.
#[repr(C, align(8))]
pub struct LpmKey {
    _pad: u32,
    prefix_len: u32,
    /// Bytes 0..8 and 8..16, each stored in network order.
    words: [u64; 2],
}

impl LpmKey {
    /// A full-length (/128) lookup key for the address with big-endian halves `hi`, `lo`.
    #[inline(always)]
    pub fn host(hi: u64, lo: u64) -> Self {
        Self {
            _pad: 0,
            prefix_len: 128,
            words: [hi.to_be(), lo.to_be()],
        }
    }

    #[inline(always)]
    pub fn as_trie_key(&self) -> &Key<CidrBytes> {
        const _: () = assert!(
            core::mem::offset_of!(LpmKey, words) - core::mem::offset_of!(LpmKey, prefix_len) == 4
        );
        const _: () = assert!(core::mem::size_of::<Key<CidrBytes>>() == 20);
        // SAFETY: from `prefix_len` on, 20 contiguous bytes with Key<[u8; 16]>'s layout (packed,
        // alignment 1).
        unsafe { &*core::ptr::addr_of!(self.prefix_len).cast::<Key<CidrBytes>>() }
    }
}
