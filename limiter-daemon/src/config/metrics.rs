//! The `[metrics]` section: where the operator listener (`/metrics`, `/healthz`, `/readyz`)
//! binds and the namespace metric names start with.
//!
//! Loopback by default, never the proxy's port: metrics name hashed identities' tiers and
//! lockout counts, which are for the operator, not the public. `listen = ""` turns the
//! listener off.

use std::net::SocketAddr;

use serde::Deserialize;

use super::ConfigError;

/// Where the operator listener binds when `[metrics] listen` is absent.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9464";
/// Metric names start with this (plus `_`) when `[metrics] namespace` is absent.
pub const DEFAULT_NAMESPACE: &str = "limiter";

/// `[metrics]` as written in the file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    /// `address:port` of the operator listener (default `127.0.0.1:9464`; `""` disables it).
    pub listen: Option<String>,
    /// Prefix of every metric name (default `limiter`; `stella` gives `stella_quota_…`).
    pub namespace: Option<String>,
}

/// The validated `[metrics]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsSettings {
    /// `None`: no operator listener.
    pub listen: Option<SocketAddr>,
    pub namespace: String,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings::validate(RawMetrics::default()).expect("defaults are valid")
    }
}

impl MetricsSettings {
    pub fn validate(raw: RawMetrics) -> Result<Self, ConfigError> {
        let listen = match raw.listen.as_deref().unwrap_or(DEFAULT_LISTEN).trim() {
            "" => None,
            s => Some(s.parse::<SocketAddr>().map_err(|_| {
                ConfigError::invalid(
                    "metrics.listen",
                    format!("{s:?} is not an address:port (e.g. \"127.0.0.1:9464\"), or \"\" to disable"),
                )
            })?),
        };
        let namespace = raw
            .namespace
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        if !valid_namespace(&namespace) {
            return Err(ConfigError::invalid(
                "metrics.namespace",
                format!(
                    "{namespace:?}: must start with a letter or `_` and hold only ASCII letters, \
                     digits and `_` (a Prometheus metric name prefix)"
                ),
            ));
        }
        Ok(MetricsSettings { listen, namespace })
    }
}

fn valid_namespace(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(listen: Option<&str>, namespace: Option<&str>) -> RawMetrics {
        RawMetrics {
            listen: listen.map(str::to_string),
            namespace: namespace.map(str::to_string),
        }
    }

    #[test]
    fn defaults_are_loopback_and_limiter() {
        let s = MetricsSettings::default();
        assert_eq!(s.listen, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!(s.namespace, "limiter");
    }

    #[test]
    fn empty_listen_disables() {
        assert_eq!(
            MetricsSettings::validate(raw(Some(""), None))
                .unwrap()
                .listen,
            None
        );
    }

    #[test]
    fn bad_values_name_the_field() {
        let e = MetricsSettings::validate(raw(Some("localhost"), None)).unwrap_err();
        assert!(e.to_string().contains("metrics.listen"), "{e}");
        for bad in ["", "9lives", "a-b", "ns.x"] {
            let e = MetricsSettings::validate(raw(None, Some(bad))).unwrap_err();
            assert!(e.to_string().contains("metrics.namespace"), "{bad}: {e}");
        }
        assert_eq!(
            MetricsSettings::validate(raw(None, Some("stella")))
                .unwrap()
                .namespace,
            "stella"
        );
    }
}
