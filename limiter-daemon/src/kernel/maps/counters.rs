//! The verdict counters (`LIM_COUNTERS`): one per-CPU packet count per verdict, which the program
//! bumps for every packet it judges, read back summed over CPUs.

use limiter_common::maps::MAP_COUNTERS;
use limiter_common::verdict;

use super::handle::KernelMaps;
use crate::kernel::KernelError;

/// Per-verdict packet counts, summed over CPUs, in `verdict::NAMES` order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counters(pub [u64; verdict::COUNT as usize]);

impl Counters {
    pub fn get(&self, index: u32) -> u64 {
        self.0.get(index as usize).copied().unwrap_or(0)
    }
    /// `(name, count)` pairs in index order.
    pub fn named(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        verdict::NAMES.iter().copied().zip(self.0.iter().copied())
    }
}

impl KernelMaps {
    /// Verdict counters summed over CPUs.
    pub fn counters(&self) -> Result<Counters, KernelError> {
        let mut out = [0u64; verdict::COUNT as usize];
        for (i, slot) in (0u32..).zip(out.iter_mut()) {
            match self.counters.get(&i, 0) {
                Ok(per_cpu) => *slot = per_cpu.iter().copied().fold(0u64, u64::wrapping_add),
                // An object built with fewer verdicts: the rest stay zero.
                Err(aya::maps::MapError::OutOfBounds { .. }) => break,
                Err(e) => return Err(KernelError::map_op("reading", MAP_COUNTERS, e)),
            }
        }
        Ok(Counters(out))
    }
}
