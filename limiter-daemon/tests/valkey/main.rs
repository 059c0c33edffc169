//! The daemon on a real Valkey: the key layout, TLS.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

mod valkey_fleet;
mod valkey_tls;
