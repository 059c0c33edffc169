//! Web Bot Auth: agents that sign their requests with HTTP Message Signatures (RFC 9421) as
//! draft-ietf-webbotauth-httpsig-protocol profiles them, and publish their keys in a
//! directory at `https://<origin>/.well-known/http-message-signatures-directory`.
//!
//! [`fields`] reads `Signature-Input`, `Signature` and `Signature-Agent` (with the `sfv`
//! crate), [`base`] rebuilds the signature base, [`verify`] checks the draft's policy and the
//! Ed25519 signature (ring), [`jwk`] reads directories and thumbprints, [`directory`] caches
//! them and queues fetches behind the request. [`verify_request`] ties them together into
//! one of three [`Outcome`]s (plus "not signed").

pub mod base;
pub mod directory;
pub mod fetcher;
pub mod fields;
pub mod jwk;
pub mod verify;

#[cfg(test)]
mod tests;

use std::net::IpAddr;

pub use self::base::RequestParts;
use self::directory::{DirectoryCache, KeyAnswer};
use self::fields::FieldError;
pub use self::verify::Refusal;

/// The `tag` a web-bot-auth signature carries.
pub const TAG: &str = "web-bot-auth";
/// Where an agent's origin publishes its keys.
pub const WELL_KNOWN: &str = "/.well-known/http-message-signatures-directory";

/// What became of a request's signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// No `Signature-Input` field: not signed.
    None,
    /// Verified with a key from this directory (the agent's identity).
    Verified { directory: String },
    /// Well formed, but the agent's keys are not known yet (fetch queued or failing), or no
    /// `Signature-Agent` names a directory: metered as what it otherwise is.
    Unverified,
    /// Forged, expired, or otherwise refused: metered as the address, counted like a fake
    /// crawler.
    Invalid(Refusal),
}

impl Outcome {
    /// The `outcome` label of `<ns>_agent_signatures_total`; `None` when not signed.
    pub fn label(&self) -> Option<&'static str> {
        match self {
            Outcome::None => None,
            Outcome::Verified { .. } => Some("verified"),
            Outcome::Unverified => Some("unverified"),
            Outcome::Invalid(_) => Some("invalid"),
        }
    }
}

/// The directory URL an agent's `Signature-Agent` value names: an `https` origin gets the
/// well-known path; an `https` URL with a path is taken as the directory itself. Anything
/// else (plain `http`, no host, user info) names no directory.
pub fn directory_url(agent: &str) -> Option<String> {
    let uri: http::Uri = agent.trim().parse().ok()?;
    if uri.scheme_str() != Some("https") {
        return None;
    }
    let authority = uri.authority()?;
    if authority.as_str().contains('@') || authority.host().is_empty() {
        return None;
    }
    let host = base::normalize_authority(authority.as_str(), Some("https"));
    match uri.path_and_query().map(|p| p.as_str()) {
        None | Some("") | Some("/") => Some(format!("https://{host}{WELL_KNOWN}")),
        Some(path) => Some(format!("https://{host}{path}")),
    }
}

/// Verifies the web-bot-auth signature of a request from `source` at `now_ms`.
///
/// Cost is bounded per address: an address refused in the last minute gets
/// [`Refusal::Refused`] without parsing further or fetching anything; policy checks come
/// before the key lookup, and the key lookup before the one Ed25519 verification.
pub fn verify_request(
    parts: &RequestParts<'_>,
    cache: &DirectoryCache,
    source: IpAddr,
    now_ms: u64,
) -> Outcome {
    if !parts.headers.contains_key("signature-input") {
        return Outcome::None;
    }
    if cache.is_refused(source, now_ms) {
        return Outcome::Invalid(Refusal::Refused);
    }
    let outcome = verify_inner(parts, cache, source, now_ms);
    if matches!(outcome, Outcome::Invalid(_)) {
        cache.refuse(source, now_ms);
    }
    outcome
}

fn verify_inner(
    parts: &RequestParts<'_>,
    cache: &DirectoryCache,
    source: IpAddr,
    now_ms: u64,
) -> Outcome {
    let presented = match fields::presented(parts.headers) {
        Ok(p) => p,
        Err(FieldError::Absent) => return Outcome::None,
        Err(FieldError::Malformed) => return Outcome::Invalid(Refusal::Malformed),
    };
    let agent = match fields::signature_agent(parts.headers, &presented.label) {
        Ok(a) => a,
        Err(_) => return Outcome::Invalid(Refusal::Malformed),
    };
    let now_s = i64::try_from(now_ms / 1000).unwrap_or(i64::MAX);
    let keyid = match verify::check_policy(&presented, agent.is_some(), now_s) {
        Ok(k) => k,
        Err(r) => return Outcome::Invalid(r),
    };
    // Without a directory there is no identity to meter: well formed, but unverified.
    let Some(directory) = agent.as_deref().and_then(directory_url) else {
        return Outcome::Unverified;
    };
    match cache.key(&directory, keyid, source, now_ms) {
        KeyAnswer::Pending => Outcome::Unverified,
        KeyAnswer::Unknown => Outcome::Invalid(Refusal::UnknownKey),
        KeyAnswer::Key(public) => match verify::verify_signature(&presented, parts, &public) {
            Ok(()) => Outcome::Verified { directory },
            Err(r) => Outcome::Invalid(r),
        },
    }
}
