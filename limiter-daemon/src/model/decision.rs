//! What a decision says: the contract between the engine and the HTTP surfaces.
//!
//! Fields may be added; existing names and meanings stay, because the proxy, the decision API
//! and the nginx endpoint all render responses from these values.
//!
//! Shadow mode is part of the value: [`Decision::shadow`] moves the verdict into a [`Shadow`]
//! (what enforcing would have done) and leaves an allow, so every surface forwards the request
//! and can still say what would have happened.

use std::time::Duration;

use super::identity_text::IdentityText;
use super::tier::Tier;
use super::window::{Reason, WindowKind, WindowState};

/// Which scan delay applies (daily quota in `delay` mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DelayKind {
    Soft,
    Hard,
}

/// What a verdict does, without its particulars (metrics labels, the decision API's `action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Forward at once.
    Allow,
    /// Hold for the verdict's delay, then forward (never a 429).
    Delay,
    /// Answer 429 (the verdict's reason says why).
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

/// What becomes of the request: each case carries exactly what it needs, so a reject always
/// has a reason and a retry time, a delay always has its length, and an allow has neither.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Forward at once.
    Allow,
    /// Hold for `delay`, then forward (never a 429).
    Delay { delay: Duration, kind: DelayKind },
    /// Answer 429; the caller should wait `retry_after_secs` (for a lockout, what is left of it).
    Reject {
        reason: Reason,
        retry_after_secs: u64,
    },
}

impl Verdict {
    pub fn action(&self) -> Action {
        match self {
            Verdict::Allow => Action::Allow,
            Verdict::Delay { .. } => Action::Delay,
            Verdict::Reject { .. } => Action::Reject,
        }
    }
}

/// What an enforcing engine would have done with a request that shadow mode let through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shadow {
    verdict: Verdict,
    would_strike: bool,
}

impl Shadow {
    /// The verdict enforcing would have given.
    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    pub fn action(&self) -> Action {
        self.verdict.action()
    }

    /// Why: a reject's reason, `daily` for a delay (only the daily quota delays), `None` for an
    /// allow.
    pub fn reason(&self) -> Option<Reason> {
        match self.verdict {
            Verdict::Allow => None,
            Verdict::Delay { .. } => Some(Reason::Daily),
            Verdict::Reject { reason, .. } => Some(reason),
        }
    }

    /// The delay enforcing would have held the request for (`Duration::ZERO` unless delayed).
    pub fn delay(&self) -> Duration {
        match self.verdict {
            Verdict::Delay { delay, .. } => delay,
            _ => Duration::ZERO,
        }
    }

    /// Whether enforcing would have recorded a strike (and a lockout) for this request.
    pub fn would_strike(&self) -> bool {
        self.would_strike
    }
}

/// A decision: everything a response needs, whatever surface renders it. Built by
/// [`Decision::new`] (an allow with no windows) and moved to its verdict by
/// [`Decision::reject`] or [`Decision::hold`]; the verdict is private, so no surface can
/// assemble a contradictory one.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    verdict: Verdict,
    pub tier: Tier,
    /// Windows that applied to this request, in [`WindowKind::ALL`] order.
    pub windows: Vec<WindowState>,
    /// Daily units left when at or below the warn threshold: the response carries a reminder.
    pub warn_remaining: Option<u64>,
    /// Stable, hashed identity of the caller (never a raw IP, token or key), used to bound held
    /// requests per identity and for logs. Held inline: no allocation per decision.
    pub identity: IdentityText,
    /// The sentence naming the next rung (from `[upgrade]`), `None` at the top of the ladder.
    pub upgrade: Option<std::sync::Arc<str>>,
    /// What became of a presented API key (metrics: key-cache results).
    pub key_status: Option<KeyStatus>,
    /// What became of a crawler claim or proof (metrics: verified and fake crawlers).
    pub crawler: Option<crate::model::CrawlerStatus>,
    /// What became of a Web Bot Auth signature, if one was presented (metrics).
    pub agent: Option<crate::model::AgentSignature>,
    /// The name a crawler or agent gives: the `[crawlers] user_agents` pattern its user agent
    /// matched, or a verified agent's directory URL; for the operator page's crawlers panel,
    /// fakes listed under the name they claim. Shared, not copied: a clone is a count. An
    /// `Arc<String>`, not `Arc<str>`: a thin pointer keeps the decision, held in every
    /// connection's future, 8 bytes smaller.
    pub claim: Option<std::sync::Arc<String>>,
    /// Set when this request earned a strike and a lockout: the new escalation level.
    pub lockout_level: Option<u32>,
    /// Units this request cost (route weight) when it was counted.
    pub cost: u32,
    /// The caller's hourly budget, for when no window reports one (a lockout counts nothing, and
    /// a route may count no hourly window): every 429 names it, whatever its reason.
    pub hourly_budget: Option<u64>,
    /// Set in shadow mode: what enforcing would have done (the verdict is then an allow).
    shadow: Option<Shadow>,
    /// Who made the lockout a `locked` refusal answers: a strike, or an operator (by hand, a
    /// deny list). The 429 says which.
    pub lock_cause: Option<crate::model::LockCause>,
    /// Set on a `network` refusal: the network over its budget and the window that refused
    /// (the 429 names the network). Boxed: a decision is held in every connection's future,
    /// and only a network's refusal carries one.
    pub network: Option<Box<super::network::NetworkState>>,
}

impl Decision {
    /// An allow for `tier`'s caller `identity`, no windows yet.
    pub fn new(
        tier: Tier,
        identity: impl Into<IdentityText>,
        upgrade: Option<std::sync::Arc<str>>,
    ) -> Decision {
        Decision {
            verdict: Verdict::Allow,
            tier,
            windows: Vec::new(),
            warn_remaining: None,
            identity: identity.into(),
            upgrade,
            key_status: None,
            crawler: None,
            agent: None,
            claim: None,
            lockout_level: None,
            lock_cause: None,
            network: None,
            cost: 0,
            hourly_budget: None,
            shadow: None,
        }
    }

    /// Shadow mode: keeps the verdict as what would have happened and turns this into an allow.
    /// `would_strike`: enforcing would have struck. A decision already shadowed stays as it is.
    pub fn shadow(&mut self, would_strike: bool) {
        if self.shadow.is_none() {
            self.shadow = Some(Shadow {
                verdict: self.verdict,
                would_strike,
            });
            self.verdict = Verdict::Allow;
        }
    }

    /// What enforcing would have done, when this decision was made in shadow mode.
    pub fn shadowed(&self) -> Option<Shadow> {
        self.shadow
    }

    /// Turns this into a 429 for `reason`, retry after `retry_after_secs`.
    pub fn reject(&mut self, reason: Reason, retry_after_secs: u64) {
        self.verdict = Verdict::Reject {
            reason,
            retry_after_secs,
        };
    }

    /// Turns this into a hold of `delay` (a scan delay of `kind`).
    pub fn hold(&mut self, delay: Duration, kind: DelayKind) {
        self.verdict = Verdict::Delay { delay, kind };
    }

    /// Turns this back into an allow.
    pub fn allow(&mut self) {
        self.verdict = Verdict::Allow;
    }

    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    pub fn action(&self) -> Action {
        self.verdict.action()
    }

    /// Why it was rejected (rejects only).
    pub fn reason(&self) -> Option<Reason> {
        match self.verdict {
            Verdict::Reject { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// Seconds the caller should wait before retrying (rejects only).
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self.verdict {
            Verdict::Reject {
                retry_after_secs, ..
            } => Some(retry_after_secs),
            _ => None,
        }
    }

    /// How long to hold the request (`Duration::ZERO` unless delayed).
    pub fn delay(&self) -> Duration {
        match self.verdict {
            Verdict::Delay { delay, .. } => delay,
            _ => Duration::ZERO,
        }
    }

    /// Which scan delay applies (delays only).
    pub fn delay_kind(&self) -> Option<DelayKind> {
        match self.verdict {
            Verdict::Delay { kind, .. } => Some(kind),
            _ => None,
        }
    }

    /// The window named `kind`, if it applied.
    pub fn window(&self, kind: WindowKind) -> Option<&WindowState> {
        self.windows.iter().find(|w| w.kind == kind)
    }
    /// The hourly budget that applied (the tighter of tier budget and key limit, if both did);
    /// without windows (a lockout), the budget that would have applied.
    pub fn hourly_limit(&self) -> Option<u64> {
        let tier = self.window(WindowKind::Hourly).map(|w| w.limit);
        let key = self.window(WindowKind::KeyHourly).map(|w| w.limit);
        match (tier, key) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (None, None) => self.hourly_budget,
            (a, b) => a.or(b),
        }
    }
}

/// Assembles a decision step by step, for tests and scripted deciders: the one way to a
/// decision besides the engine's own.
#[derive(Clone, Debug)]
pub struct DecisionBuilder(Decision);

impl Decision {
    /// A builder starting from an allow for `tier`'s caller `identity`.
    pub fn builder(tier: Tier, identity: &str) -> DecisionBuilder {
        DecisionBuilder(Decision::new(tier, identity, None))
    }
}

impl DecisionBuilder {
    pub fn upgrade(mut self, upgrade: Option<std::sync::Arc<str>>) -> Self {
        self.0.upgrade = upgrade;
        self
    }
    pub fn window(mut self, w: WindowState) -> Self {
        self.0.windows.push(w);
        self
    }
    pub fn warn_remaining(mut self, left: u64) -> Self {
        self.0.warn_remaining = Some(left);
        self
    }
    pub fn cost(mut self, cost: u32) -> Self {
        self.0.cost = cost;
        self
    }
    pub fn reject(mut self, reason: Reason, retry_after_secs: u64) -> Self {
        self.0.reject(reason, retry_after_secs);
        self
    }
    pub fn hold(mut self, delay: Duration, kind: DelayKind) -> Self {
        self.0.hold(delay, kind);
        self
    }
    pub fn hourly_budget(mut self, budget: u64) -> Self {
        self.0.hourly_budget = Some(budget);
        self
    }
    /// Shadow mode: what was set so far becomes what would have happened.
    pub fn shadow(mut self, would_strike: bool) -> Self {
        self.0.shadow(would_strike);
        self
    }
    pub fn build(self) -> Decision {
        self.0
    }
}
