//! Types and arithmetic shared by the kernel program (`limiter-ebpf`) and the daemon, and (with
//! the `std` feature) the vocabulary the daemon and limiterctl share.
//!
//! Without `std` everything here is `#![no_std]`: map keys and values are `#[repr(C)]`,
//! integer-only and free of hidden padding (each has a size assertion), so the kernel and the
//! daemon agree on every byte. Map and program names live here once and are used by both sides.
//!
//! With `std`: [`address`] (one spelling per address), [`duration_text`] (the one duration
//! grammar), [`tier`] (the ladder's rungs), [`admin_marker`] (how the admin API's clients
//! recognise it) and [`args`] (what an operator types: addresses, CIDRs, durations, tiers, AS
//! numbers), parsed alike by limiterctl, `limiter-daemon kernel` and the admin API;
//! [`admin_section`] (the config's `[admin]`, which limiterctl reads to find the daemon). With
//! `cli`: [`manuals`] (man pages and completions from both binaries' clap definitions).
#![cfg_attr(not(feature = "std"), no_std)]

#[cfg(feature = "std")]
pub mod address;
#[cfg(feature = "std")]
pub mod admin_marker;
#[cfg(feature = "std")]
pub mod admin_section;
#[cfg(feature = "std")]
pub mod args;
pub mod bucket;
pub mod config;
#[cfg(feature = "std")]
pub mod duration_text;
pub mod key;
pub mod lockout_cache;
#[cfg(feature = "cli")]
pub mod manuals;
pub mod maps;
#[cfg(feature = "std")]
pub mod tier;
pub mod verdict;

pub use bucket::Bucket;
pub use config::KernelConfig;
pub use key::IpKey;
pub use lockout_cache::LockoutSlot;
pub use maps::{CeilingEvent, DenyEntry, Lockout, TierEntry};
