//! [`ProofSources`]: the proof sources the daemon fetches itself (`[crawlers] range_urls`,
//! `[networks] asn_url`), what each last brought, and how that enters the config in force.
//!
//! It outlives reloads: [`ProofSources::configure`] follows the config's list (a source kept
//! keeps its data and validators; a new one starts from its copy on disk, [`super::proof_disk`];
//! a removed one is dropped) and [`ProofSources::overlay`] writes the last good data of every
//! source into a config (`crawlers.fetched`, `networks.asn_table`) before it goes into force.
//! A fetch that fails changes nothing but the source's status: the old data stays in force.
//!
//! Lock order: the engine's runtime lock may be held while this one is taken, never the
//! reverse.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

use super::https::Validators;
use super::proof_disk::{self, Meta};
use super::proof_parse::{self, Parsed, SourceKind};
use crate::config::Config;
use crate::model::prefix_set::PrefixSet;

/// How a fetch ended, counted per source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FetchOutcome {
    /// A new body that parsed: in force now, and on disk.
    Updated,
    /// 304: the copy held is current.
    NotModified,
    /// No body: connection, TLS, timeout, a status other than 200/304, oversize.
    Failed,
    /// A body that does not parse (or holds nothing): the old data stays.
    Refused,
}

impl FetchOutcome {
    pub const ALL: [FetchOutcome; 4] = [
        FetchOutcome::Updated,
        FetchOutcome::NotModified,
        FetchOutcome::Failed,
        FetchOutcome::Refused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FetchOutcome::Updated => "updated",
            FetchOutcome::NotModified => "not_modified",
            FetchOutcome::Failed => "failed",
            FetchOutcome::Refused => "refused",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One source as `limiterctl crawlers` and the metrics see it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceStatus {
    pub url: String,
    /// `ranges` or `asn`.
    pub kind: &'static str,
    /// The crawler a range list proves.
    pub crawler: Option<String>,
    /// Prefixes (or ASN ranges) in force from this source.
    pub entries: usize,
    /// Wall-clock ms of the data in force (when it was fetched, perhaps by an earlier run).
    pub data_fetched_ms: Option<u64>,
    /// Wall-clock ms the data in force was last known current: fetched, or confirmed by a 304
    /// (`<ns>_proof_source_age_seconds` counts from it).
    #[serde(skip)]
    pub data_confirmed_ms: Option<u64>,
    /// Whether the data in force was read from disk at start and not fetched since.
    pub from_disk: bool,
    pub last_fetch_ms: Option<u64>,
    pub last_outcome: Option<FetchOutcome>,
    pub last_error: Option<String>,
    /// Fetches since start, by [`FetchOutcome::ALL`] order.
    pub fetches: [u64; 4],
}

impl SourceStatus {
    /// Failed and refused fetches since start.
    pub fn errors(&self) -> u64 {
        self.fetches[FetchOutcome::Failed.index()] + self.fetches[FetchOutcome::Refused.index()]
    }
}

/// A source to fetch: its URL and what it proves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceSpec {
    pub url: String,
    pub kind: SourceKind,
}

/// The sources `cfg` names.
pub fn specs(cfg: &Config) -> Vec<SourceSpec> {
    let mut out: Vec<SourceSpec> = cfg
        .crawlers
        .range_urls
        .iter()
        .map(|r| SourceSpec {
            url: r.url.clone(),
            kind: SourceKind::Ranges {
                crawler: r.crawler.clone(),
            },
        })
        .collect();
    if let (Some(url), Some(_)) = (&cfg.networks.asn_url, cfg.networks.asn) {
        out.push(SourceSpec {
            url: url.clone(),
            kind: SourceKind::Asn,
        });
    }
    out
}

struct Entry {
    spec: SourceSpec,
    status: SourceStatus,
    validators: Validators,
    data: Option<Parsed>,
    /// When the next fetch is due (`None`: now).
    next_at: Option<Instant>,
}

#[derive(Default)]
struct Inner {
    entries: Vec<Entry>,
    /// Every range list's prefixes in one set (rebuilt when one changes).
    merged: Arc<PrefixSet>,
}

pub struct ProofSources {
    state_dir: Mutex<PathBuf>,
    inner: Mutex<Inner>,
}

impl ProofSources {
    pub fn new(cfg: &Config) -> Self {
        let me = ProofSources {
            state_dir: Mutex::new(cfg.store.state_dir.clone()),
            inner: Mutex::default(),
        };
        me.configure(cfg);
        me
    }

    /// Follows `cfg`'s sources: kept ones keep their data, new ones read their copy on disk.
    pub fn configure(&self, cfg: &Config) {
        let wanted = specs(cfg);
        let dir = cfg.store.state_dir.clone();
        *self.state_dir.lock() = dir.clone();
        let mut inner = self.inner.lock();
        let old = std::mem::take(&mut inner.entries);
        let mut kept: Vec<Entry> = old
            .into_iter()
            .filter(|e| wanted.contains(&e.spec))
            .collect();
        let mut entries = Vec::with_capacity(wanted.len());
        for spec in wanted {
            match kept.iter().position(|e| e.spec == spec) {
                Some(i) => entries.push(kept.swap_remove(i)),
                None => entries.push(from_disk(&dir, spec)),
            }
        }
        inner.entries = entries;
        inner.merged = merge(&inner.entries);
    }

    /// Writes the last good data of every source into `cfg`.
    pub fn overlay(&self, cfg: &mut Config) {
        let inner = self.inner.lock();
        cfg.crawlers.fetched = Arc::clone(&inner.merged);
        if cfg.networks.asn_url.is_some() {
            cfg.networks.asn_table = inner.entries.iter().find_map(|e| match &e.data {
                Some(Parsed::Asn(t)) => Some(Arc::clone(t)),
                _ => None,
            });
        }
    }

    /// `cfg` with [`Self::overlay`] (unchanged, not copied, when no source is configured).
    pub fn overlaid(&self, cfg: Arc<Config>) -> Arc<Config> {
        if self.inner.lock().entries.is_empty() {
            return cfg;
        }
        let mut c = (*cfg).clone();
        self.overlay(&mut c);
        Arc::new(c)
    }

    /// The sources whose fetch is due at `now`, with the validators to send.
    pub fn due(&self, now: Instant) -> Vec<(SourceSpec, Validators)> {
        self.inner
            .lock()
            .entries
            .iter()
            .filter(|e| e.next_at.is_none_or(|t| t <= now))
            .map(|e| (e.spec.clone(), e.validators.clone()))
            .collect()
    }

    /// When the next fetch is due (`None`: no sources).
    pub fn next_due(&self) -> Option<Option<Instant>> {
        self.inner.lock().entries.iter().map(|e| e.next_at).min()
    }

    /// Records a fetch of `spec` that ended as `outcome` (with `landed`: the new body and its
    /// validators, already parsed and on disk) at `now_ms`; the next fetch is due after
    /// `next`. Returns whether the data in force changed (the caller then puts it in force).
    pub fn record(
        &self,
        spec: &SourceSpec,
        outcome: Result<Option<(Parsed, Validators)>, (FetchOutcome, String)>,
        now_ms: u64,
        next: Instant,
    ) -> bool {
        let mut inner = self.inner.lock();
        let Some(i) = inner.entries.iter().position(|e| &e.spec == spec) else {
            // Removed by a reload while it was fetched.
            return false;
        };
        let e = &mut inner.entries[i];
        e.next_at = Some(next);
        e.status.last_fetch_ms = Some(now_ms);
        let (kind, changed) = match outcome {
            Ok(None) => {
                e.status.last_error = None;
                if e.data.is_some() {
                    e.status.data_confirmed_ms = Some(now_ms);
                }
                (FetchOutcome::NotModified, false)
            }
            Ok(Some((parsed, validators))) => {
                e.status.entries = parsed.entries();
                e.status.data_fetched_ms = Some(now_ms);
                e.status.data_confirmed_ms = Some(now_ms);
                e.status.from_disk = false;
                e.status.last_error = None;
                e.validators = validators;
                e.data = Some(parsed);
                (FetchOutcome::Updated, true)
            }
            Err((kind, error)) => {
                e.status.last_error = Some(error);
                (kind, false)
            }
        };
        e.status.last_outcome = Some(kind);
        e.status.fetches[kind.index()] += 1;
        if changed && matches!(spec.kind, SourceKind::Ranges { .. }) {
            inner.merged = merge(&inner.entries);
        }
        changed
    }

    /// Every source's status, in config order.
    pub fn status(&self) -> Vec<SourceStatus> {
        self.inner
            .lock()
            .entries
            .iter()
            .map(|e| e.status.clone())
            .collect()
    }

    /// Where copies are kept (the state directory in force).
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir.lock().clone()
    }
}

fn merge(entries: &[Entry]) -> Arc<PrefixSet> {
    Arc::new(PrefixSet::from_nets(entries.iter().flat_map(|e| {
        match &e.data {
            Some(Parsed::Ranges(nets)) => nets.as_slice(),
            _ => &[],
        }
        .iter()
        .copied()
    })))
}

/// A new source, with its copy on disk if there is a good one.
fn from_disk(dir: &std::path::Path, spec: SourceSpec) -> Entry {
    let mut entry = Entry {
        status: SourceStatus {
            url: spec.url.clone(),
            kind: spec.kind.as_str(),
            crawler: match &spec.kind {
                SourceKind::Ranges { crawler } => Some(crawler.clone()),
                SourceKind::Asn => None,
            },
            entries: 0,
            data_fetched_ms: None,
            data_confirmed_ms: None,
            from_disk: false,
            last_fetch_ms: None,
            last_outcome: None,
            last_error: None,
            fetches: [0; 4],
        },
        spec,
        validators: Validators::default(),
        data: None,
        next_at: None,
    };
    let loaded = proof_disk::read(dir, &entry.spec.url).and_then(|copy| {
        copy.map(|(meta, body)| {
            proof_parse::parse(&entry.spec.kind, &entry.spec.url, &body).map(|p| (meta, p))
        })
        .transpose()
    });
    match loaded {
        Ok(Some((
            Meta {
                validators,
                fetched_ms,
                ..
            },
            parsed,
        ))) => {
            tracing::info!(
                event = "proof_source_from_disk",
                url = %entry.spec.url,
                entries = parsed.entries(),
                "proof source: the last good copy on disk is in force until a fetch lands"
            );
            entry.status.entries = parsed.entries();
            entry.status.data_fetched_ms = Some(fetched_ms);
            entry.status.data_confirmed_ms = Some(fetched_ms);
            entry.status.from_disk = true;
            entry.validators = validators;
            entry.data = Some(parsed);
        }
        Ok(None) => {}
        Err(error) => {
            // The next good fetch overwrites it; until then the source has no data.
            tracing::warn!(
                event = "proof_source_copy_unreadable",
                url = %entry.spec.url,
                %error,
                "proof source: the copy on disk does not load; waiting for a fetch"
            );
            entry.status.last_error = Some(format!("copy on disk: {error}"));
        }
    }
    entry
}

/// The wait before the next fetch: `refresh` after a fetch that brought an answer, at most 10
/// minutes after a failure (a publisher's outage should not leave the copy stale for hours),
/// each jittered by up to a tenth so a fleet's hosts do not fetch in step.
pub fn next_wait(refresh: Duration, failed: bool) -> Duration {
    use rand::Rng as _;
    let base = if failed {
        refresh.min(Duration::from_secs(600))
    } else {
        refresh
    };
    base.mul_f64(rand::thread_rng().gen_range(0.9..1.1))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::EnvMap;

    fn cfg(dir: &Path, urls: &[&str]) -> Config {
        let list: Vec<String> = urls
            .iter()
            .map(|u| format!("{{ url = \"{u}\", crawler = \"x\" }}"))
            .collect();
        let text = format!(
            "[store]\nstate_dir = {:?}\n[crawlers]\nrange_urls = [{}]\n",
            dir.display().to_string(),
            list.join(", ")
        );
        Config::from_toml_str(&text, Path::new("t.toml"), &EnvMap::new()).unwrap()
    }

    fn landed(p: &ProofSources, url: &str, v4: &str) -> bool {
        let spec = SourceSpec {
            url: url.into(),
            kind: SourceKind::Ranges {
                crawler: "x".into(),
            },
        };
        let body = format!(r#"{{"prefixes":[{{"ipv4Prefix":"{v4}"}}]}}"#);
        let parsed = proof_parse::parse(&spec.kind, url, body.as_bytes()).unwrap();
        p.record(
            &spec,
            Ok(Some((parsed, Validators::default()))),
            1,
            Instant::now(),
        )
    }

    fn covers(p: &ProofSources, c: &Config, ip: &str) -> bool {
        let mut c = c.clone();
        p.overlay(&mut c);
        c.crawlers.fetched.contains(ip.parse().unwrap())
    }

    #[test]
    fn a_reload_keeps_a_kept_sources_data_and_drops_a_removed_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = ("https://a.example/a.json", "https://b.example/b.json");
        let both = cfg(dir.path(), &[a, b]);
        let p = ProofSources::new(&both);
        assert_eq!(p.due(Instant::now()).len(), 2, "both due at start");
        assert!(landed(&p, a, "192.0.2.0/24"));
        assert!(landed(&p, b, "198.51.100.0/24"));
        assert!(covers(&p, &both, "192.0.2.9") && covers(&p, &both, "198.51.100.9"));
        let only_a = cfg(dir.path(), &[a]);
        p.configure(&only_a);
        assert!(covers(&p, &only_a, "192.0.2.9"), "kept");
        assert!(
            !covers(&p, &only_a, "198.51.100.9"),
            "dropped with its source"
        );
        // A failure changes the status only.
        let spec = SourceSpec {
            url: a.into(),
            kind: SourceKind::Ranges {
                crawler: "x".into(),
            },
        };
        let changed = p.record(
            &spec,
            Err((FetchOutcome::Refused, "broken".into())),
            2,
            Instant::now(),
        );
        assert!(!changed);
        assert!(covers(&p, &only_a, "192.0.2.9"));
        let s = &p.status()[0];
        assert_eq!((s.entries, s.errors()), (1, 1));
        assert_eq!(s.last_outcome, Some(FetchOutcome::Refused));
    }
}
