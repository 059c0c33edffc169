//! The operator surfaces of the binary: reload, lifecycle, logs, tokens, docs, dashboards, layout.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "../kernel_support/mod.rs"]
mod kernel_support;

mod module_rules;
mod ops_api_token;
mod ops_config_docs;
mod ops_dashboards;
mod ops_kernel_reload;
mod ops_key_logs;
mod ops_lifecycle;
mod ops_logs;
mod ops_page;
mod ops_reload;
mod ops_reloader;
mod ops_self_service;
mod ops_single_binary;
mod overload;
