//! The engine in-process on a manual clock: rules, identities, stores, the store conformance suite (`cargo xtask test` runs seven `engine_*` modules again on Valkey and Valkey Cluster), kernel restore.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "../kernel_support/mod.rs"]
mod kernel_support;
mod rig;

mod crawler_engine;
mod engine_admin;
mod engine_burst_after_budget;
mod engine_check_config;
mod engine_concurrency;
mod engine_identity;
mod engine_kernel_restore;
mod engine_kernel_runaway;
mod engine_key_lookups;
mod engine_networks;
mod engine_persistence;
mod engine_properties;
mod engine_rules;
mod engine_session_quota;
mod engine_shadow;
mod engine_snapshot;
mod engine_store;
mod engine_valkey;
mod fleet_engines;
