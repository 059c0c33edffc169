//! The records a store persists: API keys, strikes, lockouts, allow/deny list entries. These
//! are the serialized forms (state files today, Valkey hashes later); secrets are hashed.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::tier::Tier;

/// An issued API key. The secret is never stored, only its hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    /// The 8 hex digits between the prefix and the secret.
    pub id: String,
    /// Hex of `IdentityHasher::secret_hash(secret)`.
    pub secret_hash: String,
    pub tier: Tier,
    /// The key's own hourly units on routes with `key_limit = true`.
    pub hourly_limit: u32,
    /// Who holds the key. Records written before owner and note were apart have one `label`,
    /// read as the owner.
    #[serde(
        default,
        alias = "label",
        deserialize_with = "empty_is_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub created_ms: u64,
    #[serde(default)]
    pub revoked_ms: Option<u64>,
}

/// Older records wrote an absent label as `""`: that is no owner.
fn empty_is_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

impl KeyRecord {
    pub fn is_revoked(&self) -> bool {
        self.revoked_ms.is_some()
    }
}

/// Strikes of one (grouped) client address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StrikeRecord {
    pub strikes: u32,
    pub last_strike_ms: u64,
    /// When the quiet period started (the end of the last lockout): decay counts from here.
    pub quiet_from_ms: u64,
}

/// Why a lockout was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LockCause {
    /// Burst exceeded (a strike).
    Burst,
    /// An operator locked it (admin API).
    Manual,
    /// The caller's network sent more than its burst (`[networks]`): the address sent in the
    /// offending window (`lockout = "addresses"`), or the whole prefix (`"prefix"`).
    Network,
}

impl LockCause {
    pub fn as_str(self) -> &'static str {
        match self {
            LockCause::Burst => "burst",
            LockCause::Manual => "manual",
            LockCause::Network => "network",
        }
    }
}

/// A lockout of one (grouped) client address, on the wall clock. Not `Copy`: it carries the
/// operator's text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lockout {
    pub ip: IpAddr,
    pub since_ms: u64,
    pub until_ms: u64,
    /// Escalation level (1 = first lockout).
    pub level: u32,
    pub cause: LockCause,
    /// The operator's reason for a manual lockout, or the network whose strike made it (`network
    /// 203.0.113.0/24 burst`). Absent in records written before it existed (and in burst
    /// lockouts), so a missing field reads as none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Lockout {
    pub fn is_active(&self, now_ms: u64) -> bool {
        now_ms < self.until_ms
    }
    pub fn remaining_ms(&self, now_ms: u64) -> u64 {
        self.until_ms.saturating_sub(now_ms)
    }
}

/// Allow- or deny-list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListKind {
    Allow,
    Deny,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListEntry {
    pub net: IpNet,
    /// Deny entries may expire; `None` = until removed.
    #[serde(default)]
    pub until_ms: Option<u64>,
    #[serde(default)]
    pub comment: String,
}

impl ListEntry {
    pub fn is_active(&self, now_ms: u64) -> bool {
        self.until_ms.is_none_or(|u| now_ms < u)
    }
}
