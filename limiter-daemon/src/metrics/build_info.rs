//! `<ns>_build_info{version, commit, features} 1`: which build answers, for dashboards that
//! join on it and for telling hosts of a fleet apart during a rollout. The commit and features
//! are stamped by `build.rs` (`unknown` outside a git checkout).

use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

/// The crate version, as `limiter-daemon version` prints it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit built (12 hex digits), or `unknown`.
pub const COMMIT: &str = env!("LIMITER_BUILD_COMMIT");
/// Comma-separated: the cargo features on, and `ebpf` when the eBPF object is embedded.
pub const FEATURES: &str = env!("LIMITER_BUILD_FEATURES");

pub fn register(registry: &mut Registry) {
    registry.register(
        "build",
        "The daemon's version, git commit and build features (value 1)",
        Info::new(vec![
            ("version".to_string(), VERSION.to_string()),
            ("commit".to_string(), COMMIT.to_string()),
            ("features".to_string(), FEATURES.to_string()),
        ]),
    );
}
