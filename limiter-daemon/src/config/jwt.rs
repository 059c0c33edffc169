//! `[jwt]`: bearer tokens that make a token holder. The verification key comes from the file or
//! inline (HS256 secret, RS256 or EdDSA public key in PEM). Absent section: no token holders.

use std::path::PathBuf;
use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;

use super::ConfigError;
use crate::model::duration_text::{self, Units};
use crate::model::Tier;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum JwtAlgorithm {
    HS256,
    RS256,
    EdDSA,
}

impl JwtAlgorithm {
    pub fn as_jsonwebtoken(self) -> Algorithm {
        match self {
            JwtAlgorithm::HS256 => Algorithm::HS256,
            JwtAlgorithm::RS256 => Algorithm::RS256,
            JwtAlgorithm::EdDSA => Algorithm::EdDSA,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwt {
    pub algorithm: JwtAlgorithm,
    /// HS256 shared secret, inline.
    pub secret: Option<String>,
    pub secret_file: Option<PathBuf>,
    /// RS256/EdDSA public key in PEM, inline.
    pub public_key: Option<String>,
    pub public_key_file: Option<PathBuf>,
    /// Rung a token holder is metered at (default `session`).
    pub token_tier: Option<Tier>,
    /// Grace past `exp`, and before `nbf` (default 0 s): clock skew between issuer and daemon.
    pub leeway: Option<String>,
    pub audience: Option<Vec<String>>,
    pub issuer: Option<Vec<String>>,
    /// Token holders' daily quota, whatever their rung (`L_jwt`, default 10,000).
    pub daily: Option<u32>,
}

#[derive(Clone)]
pub struct JwtSettings {
    pub algorithm: JwtAlgorithm,
    pub key: DecodingKey,
    pub token_tier: Tier,
    pub leeway: Duration,
    pub audience: Option<Vec<String>>,
    pub issuer: Option<Vec<String>>,
}

impl std::fmt::Debug for JwtSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtSettings")
            .field("algorithm", &self.algorithm)
            .field("key", &"<redacted>")
            .field("token_tier", &self.token_tier)
            .field("leeway", &self.leeway)
            .field("audience", &self.audience)
            .field("issuer", &self.issuer)
            .finish()
    }
}

fn read_file(field: &str, path: &PathBuf) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path)
        .map_err(|e| ConfigError::invalid(field, format!("cannot read {}: {e}", path.display())))
}

impl JwtSettings {
    pub fn validate(raw: RawJwt) -> Result<Self, ConfigError> {
        let key = match raw.algorithm {
            JwtAlgorithm::HS256 => {
                if raw.public_key.is_some() || raw.public_key_file.is_some() {
                    return Err(ConfigError::invalid(
                        "jwt.public_key",
                        "HS256 uses `secret` or `secret_file`, not a public key",
                    ));
                }
                let bytes = match (raw.secret, raw.secret_file) {
                    (Some(s), None) => s.into_bytes(),
                    (None, Some(p)) => read_file("jwt.secret_file", &p)?,
                    _ => {
                        return Err(ConfigError::invalid(
                            "jwt.secret",
                            "HS256 needs exactly one of `secret` or `secret_file`",
                        ))
                    }
                };
                let trimmed = String::from_utf8_lossy(&bytes)
                    .trim_end()
                    .as_bytes()
                    .to_vec();
                if trimmed.len() < 16 {
                    return Err(ConfigError::invalid(
                        "jwt.secret",
                        "an HS256 secret shorter than 16 bytes is too easy to guess",
                    ));
                }
                DecodingKey::from_secret(&trimmed)
            }
            alg @ (JwtAlgorithm::RS256 | JwtAlgorithm::EdDSA) => {
                if raw.secret.is_some() || raw.secret_file.is_some() {
                    return Err(ConfigError::invalid(
                        "jwt.secret",
                        format!("{alg:?} uses `public_key` or `public_key_file`, not a secret"),
                    ));
                }
                let (field, pem) = match (raw.public_key, raw.public_key_file) {
                    (Some(s), None) => ("jwt.public_key", s.into_bytes()),
                    (None, Some(p)) => {
                        ("jwt.public_key_file", read_file("jwt.public_key_file", &p)?)
                    }
                    _ => {
                        return Err(ConfigError::invalid(
                            "jwt.public_key",
                            format!(
                                "{alg:?} needs exactly one of `public_key` or `public_key_file`"
                            ),
                        ))
                    }
                };
                let parsed = if alg == JwtAlgorithm::RS256 {
                    DecodingKey::from_rsa_pem(&pem)
                } else {
                    DecodingKey::from_ed_pem(&pem)
                };
                parsed.map_err(|e| {
                    ConfigError::invalid(field, format!("not a {alg:?} public key in PEM: {e}"))
                })?
            }
        };
        let leeway = match raw.leeway {
            None => Duration::ZERO,
            Some(s) => duration_text::parse(&s, Units::Config)
                .map_err(|e| ConfigError::invalid("jwt.leeway", e.to_string()))?,
        };
        Ok(JwtSettings {
            algorithm: raw.algorithm,
            key,
            token_tier: raw.token_tier.unwrap_or(Tier::Session),
            leeway,
            audience: raw.audience,
            issuer: raw.issuer,
        })
    }
}
