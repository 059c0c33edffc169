//! Config reloads: `<ns>_config_reloads_total{result="applied|refused"}` and
//! `<ns>_config_info{sha256="…"} 1`, the hash of the config file in force (so a fleet's
//! dashboards show which hosts run which file, and whether a reload took).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadResult {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConfigHash {
    sha256: String,
}

/// Handles to the reload series.
#[derive(Debug)]
pub struct ReloadMetrics {
    applied: Counter,
    refused: Counter,
    /// Exactly one series: the file in force.
    info: Family<ConfigHash, Gauge>,
}

impl ReloadMetrics {
    pub fn register(reg: &mut Registry) -> Self {
        let reloads = Family::<ReloadResult, Counter>::default();
        reg.register(
            "config_reloads",
            "Config reloads asked for (SIGHUP or the admin API), by result: applied or refused \
             (invalid, or a change that needs a restart)",
            reloads.clone(),
        );
        let info = Family::<ConfigHash, Gauge>::default();
        reg.register(
            "config_info",
            "The config file in force: 1, labelled with the SHA-256 of its bytes",
            info.clone(),
        );
        let applied = reloads
            .get_or_create(&ReloadResult { result: "applied" })
            .clone();
        let refused = reloads
            .get_or_create(&ReloadResult { result: "refused" })
            .clone();
        ReloadMetrics {
            applied,
            refused,
            info,
        }
    }

    pub fn applied(&self) {
        self.applied.inc();
    }

    pub fn refused(&self) {
        self.refused.inc();
    }

    /// Records `sha256` (hex) as the file in force, replacing the one before.
    pub fn loaded(&self, sha256: &str) {
        self.info.clear();
        self.info
            .get_or_create(&ConfigHash {
                sha256: sha256.to_string(),
            })
            .set(1);
    }
}
