//! [`KernelMaps`], the handle on every pinned map, and how it is opened. The operations are
//! `impl KernelMaps` blocks in the sibling files, one per map or map family; they reach the maps
//! through the fields here.

use aya::maps::lpm_trie::LpmTrie;
use aya::maps::{Array, HashMap, MapData, PerCpuArray};
use limiter_common::maps::{
    AllowMark, CidrBytes, Counter, PortMark, MAP_ALLOW, MAP_BUCKET, MAP_CONFIG, MAP_COUNTERS,
    MAP_DENY, MAP_PORTS, MAP_TIER,
};
use limiter_common::{Bucket, DenyEntry, IpKey, KernelConfig, TierEntry};

use super::open::{open, Shared};
use crate::kernel::lockout_cache::LockoutTable;
use crate::kernel::pins::PinLayout;
use crate::kernel::KernelError;

/// Handles on every map the daemon writes or reads, opened from their pins.
pub struct KernelMaps {
    pub(super) layout: PinLayout,
    pub(super) config: Shared<Array<MapData, KernelConfig>>,
    pub(super) ports: Shared<Array<MapData, PortMark>>,
    pub(super) allow: Shared<LpmTrie<MapData, CidrBytes, AllowMark>>,
    pub(super) deny: Shared<LpmTrie<MapData, CidrBytes, DenyEntry>>,
    /// The lockout hash and its cache (all lockout writes go through it).
    pub(super) lockout: LockoutTable,
    pub(super) tier: Shared<HashMap<MapData, IpKey, TierEntry>>,
    pub(super) bucket: HashMap<MapData, IpKey, Bucket>,
    pub(super) counters: PerCpuArray<MapData, Counter>,
}

impl KernelMaps {
    /// Opens the maps pinned under `layout`.
    pub fn open(layout: &PinLayout) -> Result<Self, KernelError> {
        if !layout.has_maps() {
            return Err(KernelError::NotPinned {
                path: layout.root().to_path_buf(),
            });
        }
        Ok(Self {
            layout: layout.clone(),
            config: Shared::open(layout, MAP_CONFIG)?,
            ports: Shared::open(layout, MAP_PORTS)?,
            allow: Shared::open(layout, MAP_ALLOW)?,
            deny: Shared::open(layout, MAP_DENY)?,
            lockout: LockoutTable::open(layout)?,
            tier: Shared::open(layout, MAP_TIER)?,
            bucket: open(layout, MAP_BUCKET)?,
            counters: open(layout, MAP_COUNTERS)?,
        })
    }

    pub fn layout(&self) -> &PinLayout {
        &self.layout
    }
}
