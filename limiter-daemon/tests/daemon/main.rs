//! The daemon binary as a whole: semantics, snapshots, networks, proof sources, replay, memory.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "../http_support/mod.rs"]
mod http_support;
#[path = "../kernel_support/mod.rs"]
mod kernel_support;

mod daemon_api_memory;
mod daemon_semantics;
mod daemon_snapshot;
mod networks_daemon;
mod proof_sources;
mod replay;
