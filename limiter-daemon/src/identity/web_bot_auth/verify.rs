//! The checks a web-bot-auth signature must pass before (and after) its key is looked up:
//! the draft's policy (tag, `created`, `expires`, covered components, `keyid`, algorithm) and
//! the Ed25519 signature over the rebuilt signature base (ring, already built for rustls).

use ring::signature::{UnparsedPublicKey, ED25519};

use super::base::{signature_base, RequestParts};
use super::fields::Presented;

/// How far in the future `created` may be (clock skew between agent and us).
pub const MAX_SKEW_S: i64 = 60;
/// The longest a signature may live (`expires - created`), per the draft.
pub const MAX_LIFETIME_S: i64 = 24 * 3600;

/// Why a signature is invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The fields could not be read, or no label is tagged `web-bot-auth`.
    Malformed,
    NoCreated,
    FutureCreated,
    NoExpires,
    Expired,
    /// `expires` more than 24 h after `created` (or before it).
    TooLong,
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
/// whether a `Signature-Agent` field is present. Returns the `keyid`.
pub fn check_policy(p: &Presented, agent: bool, now_s: i64) -> Result<&str, Refusal> {
    if p.tag.as_deref() != Some(super::TAG) {
        return Err(Refusal::Malformed);
    }
    let created = p.created.ok_or(Refusal::NoCreated)?;
    if created > now_s + MAX_SKEW_S {
        return Err(Refusal::FutureCreated);
    }
    let expires = p.expires.ok_or(Refusal::NoExpires)?;
    if expires < now_s {
        return Err(Refusal::Expired);
    }
    if expires < created || expires - created > MAX_LIFETIME_S {
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
