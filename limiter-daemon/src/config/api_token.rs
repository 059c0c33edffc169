//! `[http] api_token_file`: the bearer token `/v1/decide` and `/v1/auth` require when set.
//! Whoever reaches those endpoints can strike any address into a kernel lockout, so off
//! loopback the token is a must ([`api_listen_warnings`] says so at `check-config`).
//!
//! The token is read from its file when the config is validated (start and reload, so a
//! reload picks up a rotated token) and never printed: `Debug` redacts it.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use super::ConfigError;

const FIELD: &str = "http.api_token_file";

/// Shortest token accepted: a guessable token is no protection.
pub const MIN_TOKEN_LEN: usize = 16;

/// The decision API's bearer token.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken(Arc<str>);

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiToken(<redacted>)")
    }
}

impl ApiToken {
    /// Reads the token from `path`: the file's text without surrounding whitespace (a trailing
    /// newline from `echo` or an editor is not part of it).
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::invalid(FIELD, format!("cannot read {}: {e}", path.display()))
        })?;
        let token = text.trim();
        if token.len() < MIN_TOKEN_LEN {
            return Err(ConfigError::invalid(
                FIELD,
                format!(
                    "the token in {} is {} characters; use at least {MIN_TOKEN_LEN} \
                     (e.g. `openssl rand -hex 32`)",
                    path.display(),
                    token.len()
                ),
            ));
        }
        if token.bytes().any(|b| !b.is_ascii_graphic()) {
            return Err(ConfigError::invalid(
                FIELD,
                format!(
                    "the token in {} holds spaces or non-ASCII characters; a bearer token \
                     must be one visible ASCII word",
                    path.display()
                ),
            ));
        }
        Ok(ApiToken(Arc::from(token)))
    }

    /// The token's bytes, for a constant-time comparison (never for a log).
    pub fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// One warning per `api_listen` address that is not loopback while no token is set.
pub fn api_listen_warnings(api_listen: &[SocketAddr], token: Option<&ApiToken>) -> Vec<String> {
    listen_warnings("http.api_listen", api_listen, token)
}

/// The same for any listener the token guards (`field`: `http.api_listen`, `http.grpc_listen`).
pub fn listen_warnings(
    field: &str,
    listen: &[SocketAddr],
    token: Option<&ApiToken>,
) -> Vec<String> {
    if token.is_some() {
        return Vec::new();
    }
    listen
        .iter()
        .filter(|a| !a.ip().is_loopback())
        .map(|a| {
            format!(
                "{field} {a} is not loopback and http.api_token_file is not set: \
                 anyone who reaches it can strike any address into a lockout; set \
                 http.api_token_file"
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_is_trimmed_checked_and_redacted() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, "0123456789abcdef0123\n").unwrap();
        let t = ApiToken::read(&p).unwrap();
        assert_eq!(t.expose(), b"0123456789abcdef0123");
        assert!(!format!("{t:?}").contains("0123"));
        std::fs::write(&p, "short").unwrap();
        assert!(ApiToken::read(&p).unwrap_err().to_string().contains(FIELD));
        std::fs::write(&p, "0123456789 abcdef0123").unwrap();
        assert!(ApiToken::read(&p).is_err());
        assert!(ApiToken::read(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn only_non_loopback_without_token_warns() {
        let a: Vec<SocketAddr> = vec!["127.0.0.1:1".parse().unwrap(), "0.0.0.0:2".parse().unwrap()];
        let w = api_listen_warnings(&a, None);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("0.0.0.0:2"));
    }
}
