//! Reloading the config while the daemon runs (SIGHUP, and `POST /admin/v1/reload` through
//! [`Reloader::hook`]).
//!
//! The order is the contract: the file is read and validated in full, then checked for
//! changes that need a restart ([`super::config_diff::restart_only`]), and only then applied:
//! the kernel's config (ceilings, protected ports), the engine's runtime (tiers, routes,
//! quotas, delays, lockout parameters, identity trust, key settings, upgrade hints) and the
//! held-request bounds. A refused file changes nothing; the old config keeps running.
//! Counters, strikes, lockouts and keys live in the store and held requests in the proxy, so
//! none of them is touched.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use super::config_diff::{changes, restart_only};
use crate::config::log::LogFormat;
use crate::config::{env_from_process, Config, ConfigError};
use crate::edge::steps::hold::HoldGate;
use crate::engine::Engine;
use crate::kernel::KernelMaps;
use crate::metrics::Metrics;
use crate::proxy::tunnel::registry::Tunnels;

/// What the admin API's reload endpoint calls: `Ok` with the changes applied, or the
/// validation error (field and line) with the old config still in force.
pub type ReloadHook = Arc<dyn Fn() -> Result<Vec<String>, ConfigError> + Send + Sync>;

/// What a reload applies to, gathered by `run` as it starts each part.
pub struct ReloadTargets {
    pub engine: Arc<Engine>,
    /// `None`: running userspace-only.
    pub kernel: Option<Arc<KernelMaps>>,
    /// `None`: no HTTP server (nothing held).
    pub gate: Option<Arc<HoldGate>>,
    /// `None`: no HTTP server (no tunnels).
    pub tunnels: Option<Arc<Tunnels>>,
    /// `None`: no HTTP server (no TLS listeners).
    pub tls: Option<Arc<crate::proxy::tls::TlsCerts>>,
    pub metrics: Arc<Metrics>,
}

pub struct Reloader {
    path: PathBuf,
    /// `--iface` given at start: wins over the file on every reload too.
    ifaces: Vec<String>,
    log_flag: Option<LogFormat>,
    targets: ReloadTargets,
    /// The text of the file in force (the change list compares with it). Held for the whole
    /// reload, so two reloads (a SIGHUP and an admin call) never interleave.
    current: Mutex<String>,
}

/// SHA-256 of a config file's bytes, in hex.
pub fn config_hash(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

impl Reloader {
    /// `text`: the file as it was loaded at start.
    pub fn new(
        path: &Path,
        text: String,
        ifaces: Vec<String>,
        log_flag: Option<LogFormat>,
        targets: ReloadTargets,
    ) -> Self {
        targets.metrics.reloads.loaded(&config_hash(&text));
        Reloader {
            path: path.to_path_buf(),
            ifaces,
            log_flag,
            targets,
            current: Mutex::new(text),
        }
    }

    /// The closure the admin API's `POST /admin/v1/reload` calls.
    pub fn hook(self: &Arc<Self>) -> ReloadHook {
        let me = Arc::clone(self);
        Arc::new(move || me.reload())
    }

    /// Re-reads and validates the file, then applies it (see the module docs). Blocking: it
    /// reads a file and may write kernel maps.
    pub fn reload(&self) -> Result<Vec<String>, ConfigError> {
        let mut current = self.current.lock();
        match self.try_reload(&current) {
            Ok((text, changed)) => {
                let hash = config_hash(&text);
                self.targets.metrics.reloads.applied();
                self.targets.metrics.reloads.loaded(&hash);
                tracing::info!(
                    event = "reload_applied",
                    path = %self.path.display(),
                    sha256 = %hash,
                    changes = ?changed,
                    "config reload applied"
                );
                *current = text;
                Ok(changed)
            }
            Err(err) => {
                self.targets.metrics.reloads.refused();
                tracing::warn!(
                    event = "reload_refused",
                    path = %self.path.display(),
                    error = %err,
                    "config reload refused; the old config stays in force"
                );
                Err(err)
            }
        }
    }

    fn try_reload(&self, current: &str) -> Result<(String, Vec<String>), ConfigError> {
        let text = std::fs::read_to_string(&self.path).map_err(|source| ConfigError::Io {
            path: self.path.clone(),
            source,
        })?;
        let mut new = Config::from_toml_str(&text, &self.path, &env_from_process())?;
        if !self.ifaces.is_empty() {
            new.kernel.interfaces.clone_from(&self.ifaces);
        }
        let old = self.targets.engine.config();
        if let Some(r) = restart_only(&old, &new, self.log_flag) {
            let message = format!(
                "changed from {} to {}: this needs a restart (the old config stays in force)",
                r.old, r.new
            );
            return Err(match crate::config::locate::line_of(&text, r.field) {
                Some(line) => ConfigError::InvalidAt {
                    path: self.path.clone(),
                    line,
                    field: r.field.to_string(),
                    message,
                },
                None => ConfigError::invalid(r.field, message),
            });
        }
        // The kernel first: if its maps cannot be written, nothing else changes either.
        if let Some(maps) = &self.targets.kernel {
            maps.write_config(&new.kernel).map_err(|err| {
                ConfigError::invalid(
                    "kernel",
                    format!(
                        "cannot write the kernel config: {}",
                        crate::kernel::error::chain(&err)
                    ),
                )
            })?;
        }
        if let Some(gate) = &self.targets.gate {
            gate.set_bounds(
                new.http.max_held.get(),
                new.http.max_held_per_identity.get(),
            );
        }
        if let Some(tunnels) = &self.targets.tunnels {
            tunnels.set_bounds(
                new.http.max_tunnels.get(),
                new.http.max_tunnels_per_identity.get(),
            );
        }
        if let Some(tls) = &self.targets.tls {
            // The files were read and checked with the rest of the config: a bad one refused
            // the reload above, and the old certificates stay.
            tls.replace(new.http.tls.clone());
        }
        let mut changed = changes(current, &text);
        if changed.is_empty()
            && format!("{:?}", old.env_applied) != format!("{:?}", new.env_applied)
        {
            changed.push("environment overrides changed".to_string());
        }
        self.targets.engine.reload(Arc::new(new));
        Ok((text, changed))
    }
}
