//! What a [`ValkeyStore`](super::valkey_store::ValkeyStore) is built from: [`ValkeyOptions`], from `[store]`
//! or by hand (tests, tools), this host's default name on the lockout stream, and where the
//! fleet secret is kept locally. A password never reaches `Debug` output.

use std::path::PathBuf;

use super::conn::err;
use crate::config::store::{StoreSettings, ValkeyPassword};
use crate::config::HashMode;
use crate::store::error::StoreError;

/// The local copy of the fleet secret, in the state directory.
pub const SECRET_FILE: &str = "fleet-secret";

/// What a [`ValkeyStore`](super::valkey_store::ValkeyStore) is built from (see [`ValkeyOptions::from_settings`]).
#[derive(Clone, Debug)]
pub struct ValkeyOptions {
    /// `host:port`, `redis://host:port` or `rediss://host:port`.
    pub address: String,
    pub prefix: String,
    pub hash: HashMode,
    /// A configured HMAC secret; `None`: the fleet's (local file and Valkey).
    pub hash_secret: Option<Vec<u8>>,
    pub username: Option<String>,
    pub password: Option<ValkeyPassword>,
    pub ca_file: Option<PathBuf>,
    /// Where the fleet secret is kept locally (`None`: only in Valkey, for tests).
    pub secret_file: Option<PathBuf>,
    /// This host on the lockout stream.
    pub host: String,
}

impl std::fmt::Debug for ValkeyPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<redacted from {}>", self.setting)
    }
}

/// `<hostname>:<pid>`, this process's default name on the lockout stream.
pub fn default_host() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let name = if name.is_empty() { "host".into() } else { name };
    format!("{name}:{}", std::process::id())
}

impl ValkeyOptions {
    /// `address` with defaults (hmac, fleet secret in Valkey only, no AUTH).
    pub fn new(address: &str, prefix: &str) -> ValkeyOptions {
        ValkeyOptions {
            address: address.to_string(),
            prefix: prefix.to_string(),
            hash: HashMode::Hmac,
            hash_secret: None,
            username: None,
            password: None,
            ca_file: None,
            secret_file: None,
            host: default_host(),
        }
    }

    /// As `[store]` configures it (the fleet secret kept in `<state_dir>/fleet-secret`).
    pub fn from_settings(s: &StoreSettings) -> Result<ValkeyOptions, StoreError> {
        let address = s
            .valkey_address
            .clone()
            .ok_or_else(|| err("connect", "store.valkey_address is not set"))?;
        Ok(ValkeyOptions {
            address,
            prefix: s.key_prefix.clone(),
            hash: s.hash,
            hash_secret: s.hash_secret.clone(),
            username: s.valkey_username.clone(),
            password: s.valkey_password.clone(),
            ca_file: s.valkey_ca_file.clone(),
            secret_file: Some(s.state_dir.join(SECRET_FILE)),
            host: s.host_id.clone().unwrap_or_else(default_host),
        })
    }
}
