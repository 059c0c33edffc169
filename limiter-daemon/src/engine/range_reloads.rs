//! [`RangeReloads`]: how often the crawler range files were re-read while the daemon ran, and
//! how often a changed file was refused (see [`super::crawlers`]); the metrics read them.

use std::sync::atomic::AtomicU64;

/// Range-file re-reads since start, read by the metrics.
#[derive(Debug, Default)]
pub struct RangeReloads {
    pub applied: AtomicU64,
    pub failed: AtomicU64,
}
