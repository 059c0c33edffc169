//! Hosts sharing one store: leases, outages, two daemons, the fleet store.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "../kernel_support/mod.rs"]
mod kernel_support;
mod rig;

mod fleet_lease_daemons;
mod fleet_leases;
mod fleet_outage;
mod fleet_two_hosts;
mod store_fleet;
