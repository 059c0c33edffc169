//! Verified crawlers on the daemon binary: published ranges and forward-confirmed DNS.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

mod rig;

mod crawler_dns;
mod crawler_ranges;
