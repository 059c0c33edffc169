//! The checks a web-bot-auth signature must pass before (and after) its key is looked up:
//! the draft's policy (tag, `created`, `expires`, covered components, `keyid`, algorithm) and
//! the Ed25519 signature over the rebuilt signature base (ring, already built for rustls).
//!
//! A signature lives minutes, not hours ([`Policy::max_lifetime_s`], `[agents]
//! max_signature_lifetime`, 5 min by default, as the draft recommends): both `expires −
//! created` and the age since `created` are bounded by it, so a captured signature is worth
//! little for long. What it covers is bound to this request by the signature itself: the base
//! is rebuilt from this request's `@authority`, `@path`, `@method`..., so a copy sent to
//! another host or path does not verify.

use ring::signature::{UnparsedPublicKey, ED25519};

use super::base::{signature_base, RequestParts};
use super::fields::Presented;
use crate::config::agents::{DEFAULT_MAX_SIGNATURE_LIFETIME, DEFAULT_NONCE_CAPACITY};
use crate::config::AgentSettings;

/// How far in the future `created` may be (clock skew between agent and us).
pub const MAX_SKEW_S: i64 = 60;
/// What a verification allows; the operator's `[agents]` settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The longest a signature may live: `expires − created`, and its age since `created`.
    pub max_lifetime_s: i64,
    /// Nonces remembered at most ([`super::nonces`]).
    pub nonce_capacity: usize,
    /// Whether a verified signature's nonce is checked against those seen and remembered: a
    /// decision does; a dry run (explain, a caller's standing) neither looks nor remembers,
    /// and answers as for the first sight of the request.
    pub nonces: bool,
}

impl Policy {
    /// The policy `[agents]` sets, for a decision (`nonces`: see [`Policy::nonces`]).
    pub fn of(cfg: &AgentSettings, nonces: bool) -> Policy {
        Policy {
            max_lifetime_s: i64::try_from(cfg.max_signature_lifetime.as_secs()).unwrap_or(i64::MAX),
            nonce_capacity: cfg.nonce_capacity,
            nonces,
        }
    }
}

/// The defaults of `[agents]`: signatures live at most 5 minutes, nonces are remembered.
impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_lifetime_s: i64::try_from(DEFAULT_MAX_SIGNATURE_LIFETIME.as_secs())
                .unwrap_or(i64::MAX),
            nonce_capacity: DEFAULT_NONCE_CAPACITY,
            nonces: true,
        }
    }
}

/// Why a signature is invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The fields could not be read, or no label is tagged `web-bot-auth`.
    Malformed,
    NoCreated,
    FutureCreated,
    NoExpires,
    Expired,
    /// `expires` more than the longest lifetime after `created` (or before it).
    TooLong,
    /// `created` longer ago than the longest lifetime.
    Stale,
    /// Neither `@authority` nor `@target-uri` is covered.
    NoAuthority,
    /// A `Signature-Agent` field is present and not covered.
    AgentNotCovered,
    NoKeyId,
    /// An `alg` other than `ed25519`.
    Algorithm,
    /// The agent's directory lists no key with this thumbprint.
    UnknownKey,
    /// The signature does not verify over the rebuilt base.
    Signature,
    /// This address sent an invalid signature recently: not verified again for a while.
    Refused,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::NoCreated => "no_created",
            Refusal::FutureCreated => "future_created",
            Refusal::NoExpires => "no_expires",
            Refusal::Expired => "expired",
            Refusal::TooLong => "too_long",
            Refusal::Stale => "stale",
            Refusal::NoAuthority => "no_authority",
            Refusal::AgentNotCovered => "agent_not_covered",
            Refusal::NoKeyId => "no_keyid",
            Refusal::Algorithm => "algorithm",
            Refusal::UnknownKey => "unknown_key",
            Refusal::Signature => "signature",
            Refusal::Refused => "refused",
        }
    }
}

/// The draft's policy, checked before any key is looked up (cheap, no crypto). `agent`:
/// whether a `Signature-Agent` field is present; `max_lifetime_s`: [`Policy::max_lifetime_s`].
/// Returns the `keyid`.
pub fn check_policy(
    p: &Presented,
    agent: bool,
    now_s: i64,
    max_lifetime_s: i64,
) -> Result<&str, Refusal> {
    if p.tag.as_deref() != Some(super::TAG) {
        return Err(Refusal::Malformed);
    }
    let created = p.created.ok_or(Refusal::NoCreated)?;
    if created > now_s + MAX_SKEW_S {
        return Err(Refusal::FutureCreated);
    }
    if now_s - created > max_lifetime_s {
        return Err(Refusal::Stale);
    }
    let expires = p.expires.ok_or(Refusal::NoExpires)?;
    if expires < now_s {
        return Err(Refusal::Expired);
    }
    if expires < created || expires - created > max_lifetime_s {
        return Err(Refusal::TooLong);
    }
    let covers = |name: &str| p.components.iter().any(|c| c.name == name);
    if !covers("@authority") && !covers("@target-uri") {
        return Err(Refusal::NoAuthority);
    }
    if agent && !covers("signature-agent") {
        return Err(Refusal::AgentNotCovered);
    }
    if p.alg.as_deref().is_some_and(|a| a != "ed25519") {
        return Err(Refusal::Algorithm);
    }
    p.keyid.as_deref().ok_or(Refusal::NoKeyId)
}

/// Whether `p`'s signature verifies with the Ed25519 key `public` over the base rebuilt from
/// `parts`.
pub fn verify_signature(
    p: &Presented,
    parts: &RequestParts<'_>,
    public: &[u8; 32],
) -> Result<(), Refusal> {
    let base = signature_base(p, parts).ok_or(Refusal::Signature)?;
    UnparsedPublicKey::new(&ED25519, public)
        .verify(base.as_bytes(), &p.signature)
        .map_err(|_| Refusal::Signature)
}
