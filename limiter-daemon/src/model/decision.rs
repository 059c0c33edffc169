//! What a decision says: the contract between the engine and the HTTP surfaces.
//!
//! Fields may be added; existing names and meanings stay, because the proxy, the decision API
//! and the nginx endpoint all render responses from these values.

use std::time::Duration;

use super::tier::Tier;
use super::window::{WindowKind, WindowState};

/// Why a request was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    Burst,
    Hourly,
    Daily,
    KeyHourly,
    Locked,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Burst => "burst",
            Reason::Hourly => "hourly",
            Reason::Daily => "daily",
            Reason::KeyHourly => "key_hourly",
            Reason::Locked => "locked",
        }
    }
}

/// Which scan delay applies (daily quota in `delay` mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DelayKind {
    Soft,
    Hard,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Forward at once.
    Allow,
    /// Hold for `Decision::delay`, then forward (never a 429).
    Delay,
    /// Answer 429 (`Decision::reason` says why).
    Reject,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Delay => "delay",
            Action::Reject => "reject",
        }
    }
}

/// What became of an API key the request presented.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyStatus {
    /// Not of the `<prefix>_<8 hex>_<20+ chars>` shape: never looked up.
    Malformed,
    /// Not known yet: metered one rung down while the lookup lands.
    Pending,
    /// Known and the secret matched: metered at the key's tier.
    Verified,
    /// Unknown, revoked, or wrong secret: metered down, never up.
    Invalid,
}

impl KeyStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyStatus::Malformed => "malformed",
            KeyStatus::Pending => "pending",
            KeyStatus::Verified => "verified",
            KeyStatus::Invalid => "invalid",
        }
    }
}

/// A decision: everything a response needs, whatever surface renders it.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub action: Action,
    pub tier: Tier,
    /// Set when `action == Reject`.
    pub reason: Option<Reason>,
    /// Seconds the caller should wait before retrying (rejects; also the lockout remainder).
    pub retry_after_secs: Option<u64>,
    /// How long to hold the request (`Duration::ZERO` unless `action == Delay`).
    pub delay: Duration,
    pub delay_kind: Option<DelayKind>,
    /// Windows that applied to this request, in the order burst, hourly, daily, key_hourly.
    pub windows: Vec<WindowState>,
    /// Daily units left when at or below the warn threshold: the response carries a reminder.
    pub warn_remaining: Option<u64>,
    /// Stable, hashed identity of the caller (never a raw IP, token or key), used to bound held
    /// requests per identity and for logs.
    pub identity: String,
    /// The sentence naming the next rung (from `[upgrade]`), `None` at the top of the ladder.
    pub upgrade: Option<std::sync::Arc<str>>,
    /// What became of a presented API key (metrics: key-cache results).
    pub key_status: Option<KeyStatus>,
    /// Set when this request earned a strike and a lockout: the new escalation level.
    pub lockout_level: Option<u32>,
    /// Units this request cost (route weight) when it was counted.
    pub cost: u32,
}

impl Decision {
    /// The window named `kind`, if it applied.
    pub fn window(&self, kind: WindowKind) -> Option<&WindowState> {
        self.windows.iter().find(|w| w.kind == kind)
    }
    /// The hourly budget that applied (the tighter of tier budget and key limit, if both did).
    pub fn hourly_limit(&self) -> Option<u64> {
        let tier = self.window(WindowKind::Hourly).map(|w| w.limit);
        let key = self.window(WindowKind::KeyHourly).map(|w| w.limit);
        match (tier, key) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
