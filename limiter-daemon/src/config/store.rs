//! `[store]`: where counters, keys, lockouts and lists live, and how identities are hashed.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::keys::duration;
use super::ConfigError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreBackend {
    /// In-process counters; keys, lockouts and lists persisted in `state_dir`.
    Embedded,
    /// A Valkey server shared by a fleet (`valkey_address`: a standalone server or any node of a Valkey Cluster).
    Valkey,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HashMode {
    /// HMAC-SHA256 with a secret (configured, or generated once into the state directory).
    Hmac,
    /// Plain SHA-256, for compatibility with existing key layouts only.
    Sha256,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    pub backend: Option<StoreBackend>,
    pub state_dir: Option<PathBuf>,
    pub hash: Option<HashMode>,
    pub hash_secret: Option<String>,
    pub hash_secret_file: Option<PathBuf>,
    /// Hard ceiling on identities counted in memory.
    pub max_identities: Option<usize>,
    /// How often the embedded store writes its counters to `state_dir` (also at shutdown).
    pub snapshot_interval: Option<String>,
    /// The Valkey server (backend = "valkey"): `host:port`, `redis://host:port`, or
    /// `rediss://host:port` for TLS.
    pub valkey_address: Option<String>,
    /// ACL user for AUTH (default: the server's `default` user).
    pub valkey_username: Option<String>,
    /// File holding the AUTH password (else env `LIMITER_VALKEY_PASSWORD`).
    pub valkey_password_file: Option<PathBuf>,
    /// PEM file of the CA that signed the server's certificate (`rediss://`).
    pub valkey_ca_file: Option<PathBuf>,
    /// This host's name on the lockout stream (default: hostname and process id).
    pub host_id: Option<String>,
    /// Namespaces every Valkey key (default `limiter:`).
    pub key_prefix: Option<String>,
    /// Deadline of one remote decision (default 50ms); past it the decision is counted locally.
    pub decision_timeout: Option<String>,
    /// While the remote store is failing, how often it is probed, by one decision and by the
    /// daemon itself (default 1s).
    pub probe_interval: Option<String>,
    /// What decisions do while the remote store is down: `local` (count in memory, default),
    /// `open` (admit), `closed` (503 with Retry-After).
    pub on_failure: Option<OnFailure>,
    /// Leased budgets on Valkey (default true): a host takes a share of a caller's budget at
    /// once and admits from it locally (docs/fleet.md). `false`: one script per decision.
    pub leases: Option<bool>,
    /// The largest lease, in requests (default 64).
    pub lease_max: Option<u32>,
    /// A lease's longest life (default 5s, at most 5s): unspent units are then given back.
    pub lease_ttl: Option<String>,
}

/// `[store] on_failure`: what a decision does while the remote store is down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Count in local memory (degraded) until the store answers again.
    #[default]
    Local,
    /// Admit without counting.
    Open,
    /// Refuse with 503 and `Retry-After`.
    Closed,
}

/// The Valkey AUTH password and the setting it came from (errors name it; never printed).
#[derive(Clone, PartialEq, Eq)]
pub struct ValkeyPassword {
    pub value: String,
    /// `store.valkey_password_file` or `LIMITER_VALKEY_PASSWORD`.
    pub setting: &'static str,
    /// The file it was read from: read again at every reconnect, so a rotated password is
    /// picked up without a restart (`None`: from the environment, fixed for the process).
    pub file: Option<PathBuf>,
}

/// The environment variable that carries the Valkey password when no file is configured.
pub const VALKEY_PASSWORD_ENV: &str = "LIMITER_VALKEY_PASSWORD";

#[derive(Clone, PartialEq, Eq)]
pub struct StoreSettings {
    pub backend: StoreBackend,
    pub state_dir: PathBuf,
    pub hash: HashMode,
    /// Configured HMAC secret (bytes); `None` means generate/keep one in `state_dir`.
    pub hash_secret: Option<Vec<u8>>,
    pub max_identities: usize,
    pub sweep_interval: Duration,
    /// Embedded store: how often counters are snapshotted (a crash loses at most this much).
    pub snapshot_interval: Duration,
    pub valkey_address: Option<String>,
    pub valkey_username: Option<String>,
    pub valkey_password: Option<ValkeyPassword>,
    pub valkey_ca_file: Option<PathBuf>,
    pub host_id: Option<String>,
    pub key_prefix: String,
    pub decision_timeout: Duration,
    pub probe_interval: Duration,
    pub on_failure: OnFailure,
    pub leases: bool,
    pub lease_max: u32,
    pub lease_ttl: Duration,
}

impl std::fmt::Debug for StoreSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreSettings")
            .field("backend", &self.backend)
            .field("state_dir", &self.state_dir)
            .field("hash", &self.hash)
            .field(
                "hash_secret",
                &self.hash_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("max_identities", &self.max_identities)
            .field("sweep_interval", &self.sweep_interval)
            .field("snapshot_interval", &self.snapshot_interval)
            .field("valkey_address", &self.valkey_address)
            .field("valkey_username", &self.valkey_username)
            .field(
                "valkey_password",
                &self.valkey_password.as_ref().map(|_| "<redacted>"),
            )
            .field("valkey_ca_file", &self.valkey_ca_file)
            .field("host_id", &self.host_id)
            .field("key_prefix", &self.key_prefix)
            .field("decision_timeout", &self.decision_timeout)
            .field("probe_interval", &self.probe_interval)
            .field("on_failure", &self.on_failure)
            .field("leases", &self.leases)
            .field("lease_max", &self.lease_max)
            .field("lease_ttl", &self.lease_ttl)
            .finish()
    }
}

/// `[store] lease_max` by default: the largest lease, in requests.
pub const DEFAULT_LEASE_MAX: u32 = 64;
/// `[store] lease_ttl` by default, and the most it may be: one burst slot. A grant's burst
/// units die with their slot anyway, so a longer life could not be spent; a shorter one only
/// makes a holder that asks every few seconds lease (and give back) more often.
pub const LEASE_TTL_MS: u64 = 5_000;

pub use limiter_common::admin_section::DEFAULT_STATE_DIR;

impl StoreSettings {
    /// Defaults with a given state directory (tests, benches).
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        let mut s = StoreSettings::validate(RawStore::default()).expect("defaults are valid");
        s.state_dir = dir.into();
        s
    }

    pub fn validate(raw: RawStore) -> Result<Self, ConfigError> {
        let hash = raw.hash.unwrap_or(HashMode::Hmac);
        let hash_secret = match (raw.hash_secret, raw.hash_secret_file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::invalid(
                    "store.hash_secret",
                    "set `hash_secret` or `hash_secret_file`, not both",
                ))
            }
            (Some(s), None) => Some(s.into_bytes()),
            (None, Some(p)) => Some(
                std::fs::read(&p)
                    .map_err(|e| {
                        ConfigError::invalid(
                            "store.hash_secret_file",
                            format!("cannot read {}: {e}", p.display()),
                        )
                    })?
                    .trim_ascii()
                    .to_vec(),
            ),
            (None, None) => None,
        };
        if let Some(s) = &hash_secret {
            if hash == HashMode::Sha256 {
                return Err(ConfigError::invalid(
                    "store.hash_secret",
                    "a secret has no use with `hash = \"sha256\"`",
                ));
            }
            if s.len() < 16 {
                return Err(ConfigError::invalid(
                    "store.hash_secret",
                    "must be at least 16 bytes",
                ));
            }
        }
        let max_identities = raw.max_identities.unwrap_or(2_000_000);
        if max_identities < 1024 {
            return Err(ConfigError::invalid(
                "store.max_identities",
                "must be at least 1024",
            ));
        }
        let snapshot_interval = duration(
            "store.snapshot_interval",
            raw.snapshot_interval,
            Duration::from_secs(10),
        )?;
        if snapshot_interval < Duration::from_millis(100) {
            return Err(ConfigError::invalid(
                "store.snapshot_interval",
                "must be at least 100ms (each snapshot writes every tracked identity)",
            ));
        }
        let state_dir = raw
            .state_dir
            .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
        // An empty path resolves to the working directory: the hash secret and admin token
        // would land wherever the daemon happened to be started.
        if state_dir.as_os_str().is_empty() {
            return Err(ConfigError::invalid(
                "store.state_dir",
                format!("must not be empty (e.g. \"{DEFAULT_STATE_DIR}\")"),
            ));
        }
        let backend = raw.backend.unwrap_or(StoreBackend::Embedded);
        match (backend, &raw.valkey_address) {
            (StoreBackend::Valkey, None) => {
                return Err(ConfigError::invalid(
                    "store.valkey_address",
                    "backend = \"valkey\" needs the server's host:port",
                ))
            }
            (StoreBackend::Embedded, Some(_)) => {
                return Err(ConfigError::invalid(
                    "store.valkey_address",
                    "only used with backend = \"valkey\"",
                ))
            }
            (_, Some(a)) if !a.contains(':') => {
                return Err(ConfigError::invalid(
                    "store.valkey_address",
                    format!("{a:?} is not host:port"),
                ))
            }
            _ => {}
        }
        let decision_timeout = duration(
            "store.decision_timeout",
            raw.decision_timeout,
            Duration::from_millis(50),
        )?;
        if decision_timeout < Duration::from_millis(1) || decision_timeout > Duration::from_secs(10)
        {
            return Err(ConfigError::invalid(
                "store.decision_timeout",
                "must be between 1ms and 10s",
            ));
        }
        let probe_interval = duration(
            "store.probe_interval",
            raw.probe_interval,
            Duration::from_secs(1),
        )?;
        if probe_interval < Duration::from_millis(10) {
            return Err(ConfigError::invalid(
                "store.probe_interval",
                "must be at least 10ms",
            ));
        }
        let valkey_password = match raw.valkey_password_file {
            Some(p) => Some(ValkeyPassword {
                value: std::fs::read_to_string(&p)
                    .map_err(|e| {
                        ConfigError::invalid(
                            "store.valkey_password_file",
                            format!("cannot read {}: {e}", p.display()),
                        )
                    })?
                    .trim_end_matches(['\r', '\n'])
                    .to_string(),
                setting: "store.valkey_password_file",
                file: Some(p),
            }),
            None => std::env::var(VALKEY_PASSWORD_ENV)
                .ok()
                .filter(|v| !v.is_empty())
                .map(|value| ValkeyPassword {
                    value,
                    setting: VALKEY_PASSWORD_ENV,
                    file: None,
                }),
        };
        if raw.valkey_ca_file.is_some()
            && !raw
                .valkey_address
                .as_deref()
                .is_some_and(|a| a.starts_with("rediss://"))
        {
            return Err(ConfigError::invalid(
                "store.valkey_ca_file",
                "only used with a rediss:// valkey_address (TLS)",
            ));
        }
        if raw.host_id.as_deref().is_some_and(|h| h.trim().is_empty()) {
            return Err(ConfigError::invalid("store.host_id", "must not be empty"));
        }
        let lease_max = raw.lease_max.unwrap_or(DEFAULT_LEASE_MAX);
        if !(1..=10_000).contains(&lease_max) {
            return Err(ConfigError::invalid(
                "store.lease_max",
                "must be between 1 and 10000",
            ));
        }
        let lease_ttl = duration(
            "store.lease_ttl",
            raw.lease_ttl,
            Duration::from_millis(LEASE_TTL_MS),
        )?;
        if lease_ttl < Duration::from_millis(1) || lease_ttl > Duration::from_millis(LEASE_TTL_MS) {
            return Err(ConfigError::invalid(
                "store.lease_ttl",
                "must be between 1ms and 5s (a lease's burst units die with their 5 s slot)",
            ));
        }
        Ok(StoreSettings {
            leases: raw.leases.unwrap_or(true),
            lease_max,
            lease_ttl,
            valkey_username: raw.valkey_username,
            valkey_password,
            valkey_ca_file: raw.valkey_ca_file,
            host_id: raw.host_id,
            decision_timeout,
            probe_interval,
            on_failure: raw.on_failure.unwrap_or_default(),
            backend,
            valkey_address: raw.valkey_address,
            key_prefix: raw.key_prefix.unwrap_or_else(|| "limiter:".to_string()),
            state_dir,
            hash,
            hash_secret,
            max_identities,
            // Not a setting: memory is bounded by `max_identities` whatever the cadence.
            sweep_interval: Duration::from_secs(60),
            snapshot_interval,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valkey(extra: RawStore) -> RawStore {
        RawStore {
            backend: Some(StoreBackend::Valkey),
            valkey_address: Some("rediss://127.0.0.1:6380".into()),
            ..extra
        }
    }

    #[test]
    fn the_password_comes_from_its_file_and_debug_never_shows_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret-horse\n").unwrap();
        let s = StoreSettings::validate(valkey(RawStore {
            valkey_password_file: Some(file),
            valkey_username: Some("limiter".into()),
            ..RawStore::default()
        }))
        .unwrap();
        let pw = s.valkey_password.as_ref().unwrap();
        assert_eq!(
            (pw.value.as_str(), pw.setting),
            ("s3cret-horse", "store.valkey_password_file")
        );
        assert!(!format!("{s:?}").contains("s3cret"), "{s:?}");
        let e = StoreSettings::validate(valkey(RawStore {
            valkey_password_file: Some(dir.path().join("missing")),
            ..RawStore::default()
        }))
        .unwrap_err();
        assert!(e.to_string().contains("store.valkey_password_file"), "{e}");
    }

    #[test]
    fn a_ca_file_needs_rediss_and_a_host_id_a_name() {
        let e = StoreSettings::validate(RawStore {
            backend: Some(StoreBackend::Valkey),
            valkey_address: Some("127.0.0.1:6379".into()),
            valkey_ca_file: Some("/etc/ca.pem".into()),
            ..RawStore::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("store.valkey_ca_file"), "{e}");
        let e = StoreSettings::validate(valkey(RawStore {
            host_id: Some(" ".into()),
            ..RawStore::default()
        }))
        .unwrap_err();
        assert!(e.to_string().contains("store.host_id"), "{e}");
    }
}
