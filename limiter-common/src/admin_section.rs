//! The daemon config's `[admin]` section: where the admin API listens and where its bearer
//! token comes from. The daemon validates it with the rest of its config; limiterctl reads it
//! (and the default state directory) to find the daemon and its token.
//!
//! Loopback by default: the admin API issues keys and lifts lockouts, so it is never meant for
//! the public. `listen = ""` turns it off. Without `token_file` (or `LIMITER_ADMIN_TOKEN` in the
//! environment) the daemon generates a token into `<state_dir>/admin-token` at first start.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// A field of `[admin]` that does not validate (the daemon's config error names it the same).
#[derive(Debug, thiserror::Error)]
#[error("config field `{field}`: {message}")]
pub struct Invalid {
    pub field: &'static str,
    pub message: String,
}

impl Invalid {
    fn new(field: &'static str, message: impl Into<String>) -> Self {
        Invalid {
            field,
            message: message.into(),
        }
    }
}

/// Where the admin API binds when `[admin] listen` is absent.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9465";
/// The environment variable that carries the admin token (daemon and limiterctl).
pub const TOKEN_ENV: &str = "LIMITER_ADMIN_TOKEN";
/// The file under the state directory that holds a generated token.
pub const GENERATED_TOKEN_FILE: &str = "admin-token";
/// `[store] state_dir` when absent.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/limiter";

/// `[admin]` as written in the file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    /// `address:port` of the admin API (default `127.0.0.1:9465`; `""` disables it).
    pub listen: Option<String>,
    /// A file whose content (trimmed) is the bearer token.
    pub token_file: Option<PathBuf>,
    /// Show callers' addresses and networks on the operator page and in `limiterctl top`
    /// (default `true`); `false` shows hashes only.
    pub show_addresses: Option<bool>,
}

/// The validated `[admin]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminSettings {
    /// `None`: no admin listener.
    pub listen: Option<SocketAddr>,
    pub token_file: Option<PathBuf>,
    /// `[admin] show_addresses`: the stats answer carries addresses (else hashes).
    pub show_addresses: bool,
}

impl Default for AdminSettings {
    fn default() -> Self {
        AdminSettings::validate(RawAdmin::default()).expect("defaults are valid")
    }
}

impl AdminSettings {
    pub fn validate(raw: RawAdmin) -> Result<Self, Invalid> {
        let listen = match raw.listen.as_deref().unwrap_or(DEFAULT_LISTEN).trim() {
            "" => None,
            s => Some(s.parse::<SocketAddr>().map_err(|_| {
                Invalid::new(
                    "admin.listen",
                    format!(
                        "{s:?} is not an address:port (e.g. \"127.0.0.1:9465\"), or \"\" to disable"
                    ),
                )
            })?),
        };
        if let Some(p) = &raw.token_file {
            if p.as_os_str().is_empty() {
                return Err(Invalid::new(
                    "admin.token_file",
                    "must name a file (leave the field out to use LIMITER_ADMIN_TOKEN or a generated token)",
                ));
            }
        }
        Ok(AdminSettings {
            listen,
            token_file: raw.token_file,
            show_addresses: raw.show_addresses.unwrap_or(true),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_loopback_and_empty_turns_it_off() {
        let d = AdminSettings::default();
        assert_eq!(d.listen, Some(DEFAULT_LISTEN.parse().unwrap()));
        assert!(d.show_addresses, "addresses are shown unless turned off");
        let off = AdminSettings::validate(RawAdmin {
            listen: Some(String::new()),
            token_file: None,
            show_addresses: None,
        })
        .unwrap();
        assert_eq!(off.listen, None);
        let err = AdminSettings::validate(RawAdmin {
            listen: Some("localhost".into()),
            token_file: None,
            show_addresses: None,
        })
        .unwrap_err();
        assert!(err.to_string().contains("admin.listen"), "{err}");
    }
}
