//! Bearer JWTs: signature verified with the configured key (HS256, RS256, EdDSA); `exp` is
//! required, and it and `nbf` (when present) are checked against the injected clock (never the
//! system clock) with the same `[jwt] leeway`. A valid token is counted per token ID: `jti`,
//! else `sub`, else the signature.

use http::header::AUTHORIZATION;
use http::HeaderMap;
use jsonwebtoken::{decode, Validation};
use serde::Deserialize;

use crate::config::JwtSettings;
use crate::model::Tier;

#[derive(Deserialize)]
struct Claims {
    exp: f64,
    nbf: Option<f64>,
    jti: Option<String>,
    sub: Option<String>,
}

/// A verified token holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenHolder {
    /// The subject counted (token ID, raw: hash it before storing or logging).
    pub token_id: String,
    pub tier: Tier,
}

pub struct JwtVerifier {
    validation: Validation,
    settings: JwtSettings,
}

impl JwtVerifier {
    pub fn new(settings: &JwtSettings) -> Self {
        let mut v = Validation::new(settings.algorithm.as_jsonwebtoken());
        // Expiry and not-before are checked below against the injected clock, not the
        // library's system clock.
        v.validate_exp = false;
        v.validate_nbf = false;
        v.leeway = 0;
        v.set_required_spec_claims(&["exp"]);
        match &settings.audience {
            Some(aud) => v.set_audience(aud),
            None => v.validate_aud = false,
        }
        if let Some(iss) = &settings.issuer {
            v.set_issuer(iss);
        }
        JwtVerifier {
            validation: v,
            settings: settings.clone(),
        }
    }

    /// `Some` when `token` verifies and is in force at `now_ms` (not expired, not before its
    /// `nbf`, each within the leeway); `None` for anything else.
    pub fn verify(&self, token: &str, now_ms: u64) -> Option<TokenHolder> {
        let data = decode::<Claims>(token, &self.settings.key, &self.validation).ok()?;
        let c = data.claims;
        if !c.exp.is_finite() {
            return None;
        }
        let exp_ms = (c.exp * 1000.0) as u64;
        let leeway = u64::try_from(self.settings.leeway.as_millis()).unwrap_or(u64::MAX);
        if now_ms >= exp_ms.saturating_add(leeway) {
            return None;
        }
        if let Some(nbf) = c.nbf {
            if !nbf.is_finite() {
                return None;
            }
            // Negative claims saturate to 0 in the cast: in force since the epoch.
            let nbf_ms = (nbf * 1000.0) as u64;
            if now_ms.saturating_add(leeway) < nbf_ms {
                return None;
            }
        }
        let token_id = c
            .jti
            .filter(|s| !s.is_empty())
            .or(c.sub.filter(|s| !s.is_empty()))
            .unwrap_or_else(|| token.rsplit('.').next().unwrap_or(token).to_string());
        Some(TokenHolder {
            token_id,
            tier: self.settings.token_tier,
        })
    }
}

/// The credential in `Authorization: Bearer …`, if the header reads as one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, rest) = v.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let t = rest.trim();
    (!t.is_empty()).then_some(t)
}
