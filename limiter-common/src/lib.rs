//! Types and arithmetic shared by the kernel program (`limiter-ebpf`) and the daemon.
//!
//! Everything here is `#![no_std]`: map keys and values are `#[repr(C)]`, integer-only and free of
//! hidden padding (each has a size assertion), so the kernel and the daemon agree on every byte.
//! Map and program names live here once and are used by both sides.
#![no_std]

pub mod bucket;
pub mod config;
pub mod key;
pub mod lockout_cache;
pub mod maps;
pub mod verdict;

pub use bucket::Bucket;
pub use config::KernelConfig;
pub use key::IpKey;
pub use lockout_cache::LockoutSlot;
pub use maps::{CeilingEvent, DenyEntry, Lockout, TierEntry};
