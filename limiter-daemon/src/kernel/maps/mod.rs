//! Typed operations on the pinned maps, shared by the running daemon and the `kernel` CLI (which
//! opens the same pins while the daemon may be stopped).
//!
//! [`KernelMaps`] is one handle on every map; its operations are split by map, one file each:
//!
//! - `handle`: the handle itself and how it is opened from the pins.
//! - `config`: the runtime config and the protected ports; `list_flags`: the config's "trie has
//!   entries" flags, kept in step with the allow and deny tries.
//! - `lockouts`: lock, unlock, read back (through [`crate::kernel::lockout_cache`]).
//! - `tiers`: verified tiers; `lists`: the allow and deny tries.
//! - `sweep`: removing expired lockouts and deny entries.
//! - `counters`: the verdict counters; `fill`: entries against capacity.
//! - `open`: opening one pinned map (also used by the lockout cache); `capacity`: map capacity
//!   and the "map full" error; `opt_secs`: how the views serialize time left.
//!
//! Each map sits behind its own mutex because aya's update calls take `&mut`; every operation is a
//! handful of `bpf()` syscalls, so holding a lock for one is cheap and never blocks on I/O.
//!
//! Shared pieces live in leaf files (`open`, `capacity`, `opt_secs`, `handle`) that the map files
//! import; this file only declares and re-exports, so no child imports its parent.

mod capacity;
mod config;
mod counters;
mod fill;
mod handle;
mod list_flags;
mod lists;
mod lockouts;
pub(super) mod open;
mod opt_secs;
mod sweep;
mod tiers;

pub use counters::Counters;
pub use fill::MapFill;
pub use handle::KernelMaps;
pub use lists::DenyView;
pub use lockouts::LockoutView;
pub use sweep::Swept;

#[cfg(test)]
mod tests;
