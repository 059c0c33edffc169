//! How many entries a map holds at most, and the error for a write that found no room: a full map
//! is [`KernelError::MapFull`] (which tells the operator to raise the capacity), anything else a
//! plain map error.

use aya::maps::lpm_trie::LpmTrie;
use aya::maps::{HashMap, MapData};
use limiter_common::{IpKey, Lockout};

use crate::kernel::error::is_full;
use crate::kernel::KernelError;

/// Capacity of a map, from the kernel's own description of it.
pub(super) trait Capacity {
    fn map_capacity(&self) -> u32;
}

impl<K: aya::Pod, V: aya::Pod> Capacity for HashMap<MapData, K, V> {
    fn map_capacity(&self) -> u32 {
        use aya::maps::IterableMap;
        self.map().info().map(|i| i.max_entries()).unwrap_or(0)
    }
}

impl<K: aya::Pod, V: aya::Pod> Capacity for LpmTrie<MapData, K, V> {
    fn map_capacity(&self) -> u32 {
        use aya::maps::IterableMap;
        self.map().info().map(|i| i.max_entries()).unwrap_or(0)
    }
}

/// A failed write to the lockout hash: `MapFull` when the hash has no room.
pub(super) fn full_or(
    e: aya::maps::MapError,
    op: &'static str,
    name: &'static str,
    map: &HashMap<MapData, IpKey, Lockout>,
) -> KernelError {
    if is_full(&e) {
        KernelError::MapFull {
            name,
            capacity: map.map_capacity(),
        }
    } else {
        KernelError::map_op(op, name, e)
    }
}

/// A failed insert into an LPM trie. A full trie can also answer `ENOSPC`, so that counts as full
/// too.
pub(super) fn full_or_trie(
    e: aya::maps::MapError,
    op: &'static str,
    name: &'static str,
    capacity: u32,
) -> KernelError {
    if is_full(&e)
        || matches!(&e, aya::maps::MapError::SyscallError(s) if s.io_error.raw_os_error() == Some(libc::ENOSPC))
    {
        KernelError::MapFull { name, capacity }
    } else {
        KernelError::map_op(op, name, e)
    }
}
