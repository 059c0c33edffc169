//! The admin API and `limiterctl` against the real daemon binary.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "../kernel_support/mod.rs"]
mod kernel_support;

mod admin_api;
mod admin_docs;
mod admin_kernel;
mod ctl_top;
