//! Web Bot Auth: agents that sign their requests with HTTP Message Signatures (RFC 9421) as
//! draft-ietf-webbotauth-httpsig-protocol profiles them, and publish their keys in a
//! directory at `https://<origin>/.well-known/http-message-signatures-directory`.
//!
//! [`fields`] reads `Signature-Input`, `Signature` and `Signature-Agent` (with the `sfv`
//! crate), [`base`] rebuilds the signature base, [`verify`] checks the draft's policy and the
//! Ed25519 signature (ring), [`jwk`] reads directories and thumbprints, [`directory`] caches
//! them and queues fetches behind the request, [`crate::fetch::agent_directories`] fetches them, [`nonces`] remembers
//! the nonces of verified signatures. [`verify_request`] ties them together into one of four
//! [`Outcome`]s (plus "not signed").
//!
//! What a verified signature proves: the holder of a key the agent's directory lists signed
//! this request's covered components (always `@authority`, and `Signature-Agent`; `@path`,
//! `@method` and the rest when covered) within the last few minutes
//! ([`verify::Policy::max_lifetime_s`]). What it does not prove: that the agent behaves well,
//! or that this copy came from the agent. A signature with a nonce verifies once; one without
//! can be sent again by whoever captured it, to the host and path it covers, until it expires.

pub mod base;
pub mod directory;
pub mod fields;
pub mod jwk;
pub mod nonces;
pub mod signer;
pub mod verify;

#[cfg(test)]
mod tests;

use std::net::IpAddr;

pub use self::base::RequestParts;
use self::directory::{DirectoryCache, KeyAnswer};
use self::fields::FieldError;
use self::nonces::Seen;
pub use self::verify::{Policy, Refusal};

/// The `tag` a web-bot-auth signature carries.
pub const TAG: &str = "web-bot-auth";
pub use crate::model::agent::{directory_url, WELL_KNOWN};

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
    /// Verifies, but its nonce was seen within its life: a replay (or a retry not signed
    /// again). Metered as what it otherwise is; the address is not refused for it.
    Replayed,
}

impl Outcome {
    /// The `outcome` label of `<ns>_agent_signatures_total`; `None` when not signed.
    pub fn label(&self) -> Option<&'static str> {
        match self {
            Outcome::None => None,
            Outcome::Verified { .. } => Some("verified"),
            Outcome::Unverified => Some("unverified"),
            Outcome::Invalid(_) => Some("invalid"),
            Outcome::Replayed => Some("replayed"),
        }
    }
}

/// What [`check_request`] found: the outcome, and the directory to fetch (for the
/// request's source) once the request is admitted, when one is due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    pub outcome: Outcome,
    pub fetch: Option<String>,
}

/// Verifies the web-bot-auth signature of a request from `source` at `now_ms` under the
/// default [`Policy`], queueing the agent's directory for a fetch when it is unknown or stale
/// (library users and tests; the engine uses [`check_request`] and queues only for admitted
/// requests).
pub fn verify_request(
    parts: &RequestParts<'_>,
    cache: &DirectoryCache,
    source: IpAddr,
    now_ms: u64,
) -> Outcome {
    let checked = check_request(parts, cache, source, now_ms, &Policy::default(), |_| true);
    if let Some(directory) = &checked.fetch {
        cache.request_fetch(directory, source, now_ms);
    }
    checked.outcome
}

/// Checks the web-bot-auth signature of a request from `source` at `now_ms` under `policy`,
/// queueing nothing. Agents `may_verify` refuses (the operator's `[agents]` lists) are
/// unverified and never fetched.
///
/// Cost is bounded per address: an address refused in the last minute gets
/// [`Refusal::Refused`] without parsing further or fetching anything; policy checks come
/// before the key lookup, and the key lookup before the one Ed25519 verification.
pub fn check_request(
    parts: &RequestParts<'_>,
    cache: &DirectoryCache,
    source: IpAddr,
    now_ms: u64,
    policy: &Policy,
    may_verify: impl Fn(&str) -> bool,
) -> Checked {
    let unchecked = |outcome| Checked {
        outcome,
        fetch: None,
    };
    if !parts.headers.contains_key("signature-input") {
        return unchecked(Outcome::None);
    }
    if cache.is_refused(source, now_ms) {
        return unchecked(Outcome::Invalid(Refusal::Refused));
    }
    let checked = check_inner(parts, cache, now_ms, policy, may_verify);
    if matches!(checked.outcome, Outcome::Invalid(_)) {
        cache.refuse(source, now_ms);
    }
    checked
}

fn check_inner(
    parts: &RequestParts<'_>,
    cache: &DirectoryCache,
    now_ms: u64,
    policy: &Policy,
    may_verify: impl Fn(&str) -> bool,
) -> Checked {
    let unchecked = |outcome| Checked {
        outcome,
        fetch: None,
    };
    let presented = match fields::presented(parts.headers) {
        Ok(p) => p,
        Err(FieldError::Absent) => return unchecked(Outcome::None),
        Err(FieldError::Malformed) => return unchecked(Outcome::Invalid(Refusal::Malformed)),
    };
    let agent = match fields::signature_agent(parts.headers, &presented.label) {
        Ok(a) => a,
        Err(_) => return unchecked(Outcome::Invalid(Refusal::Malformed)),
    };
    let now_s = i64::try_from(now_ms / 1000).unwrap_or(i64::MAX);
    let keyid =
        match verify::check_policy(&presented, agent.is_some(), now_s, policy.max_lifetime_s) {
            Ok(k) => k,
            Err(r) => return unchecked(Outcome::Invalid(r)),
        };
    // Without a directory there is no identity to meter: well formed, but unverified.
    let Some(directory) = agent.as_deref().and_then(directory_url) else {
        return unchecked(Outcome::Unverified);
    };
    // An agent the operator does not verify, or a signature over a part of the request this
    // surface was not given: nothing can be said either way.
    if !may_verify(&directory) || base::unseen_component(&presented, parts) {
        return unchecked(Outcome::Unverified);
    }
    let (answer, due) = cache.peek(&directory, keyid, now_ms);
    let outcome = match answer {
        KeyAnswer::Pending => Outcome::Unverified,
        KeyAnswer::Unknown => Outcome::Invalid(Refusal::UnknownKey),
        KeyAnswer::Key(public) => match verify::verify_signature(&presented, parts, &public) {
            Ok(()) => once(&presented, &directory, cache, now_s, policy),
            Err(r) => Outcome::Invalid(r),
        },
    };
    // A stale directory is refetched while its keys still answer; none for an address that
    // just sent an invalid signature.
    let fetch = (due && !matches!(outcome, Outcome::Invalid(_))).then_some(directory);
    Checked { outcome, fetch }
}

/// A verified signature's outcome once its nonce is looked up (and remembered): verified the
/// first time, replayed after; unverified when the nonce set is full (see [`nonces`]).
fn once(
    presented: &fields::Presented,
    directory: &str,
    cache: &DirectoryCache,
    now_s: i64,
    policy: &Policy,
) -> Outcome {
    let verified = Outcome::Verified {
        directory: directory.to_owned(),
    };
    let (Some(nonce), Some(expires), true) = (&presented.nonce, presented.expires, policy.nonces)
    else {
        return verified;
    };
    match cache
        .nonces()
        .remember(directory, nonce, expires, now_s, policy.nonce_capacity)
    {
        Seen::New => verified,
        Seen::Repeat => Outcome::Replayed,
        Seen::Full => {
            nonces_full_warning(now_s);
            Outcome::Unverified
        }
    }
}

/// Warns that the nonce set is full, at most once a minute.
fn nonces_full_warning(now_s: i64) {
    static LAST: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(i64::MIN);
    let last = LAST.load(std::sync::atomic::Ordering::Relaxed);
    if now_s.saturating_sub(last) >= 60
        && LAST
            .compare_exchange(
                last,
                now_s,
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
            )
            .is_ok()
    {
        tracing::warn!(
            "agent signature nonces: [agents] nonce_capacity reached; signatures with a new \
             nonce are unverified until older ones expire"
        );
    }
}
