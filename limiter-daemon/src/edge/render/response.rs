//! How a [`Decision`] becomes an HTTP answer: the rate-limit headers every response carries, the
//! 429 problem document with its upgrade hint, and the 503s for a held request: its caller's
//! held requests are over the bound, or the daemon stopped before its delay was over.
//!
//! Header set (names lower-case on the wire):
//! - `x-ratelimit-tier`, `x-ratelimit-limit-hour` (the hourly budget that applies, the tighter of
//!   tier budget and key limit), and `x-ratelimit-limit` / `-remaining` / `-reset` for the
//!   *binding* window: on a reject the window named by the reason, otherwise the window with the
//!   fewest units left.
//! - IETF draft `RateLimit-Policy` (one named policy per window, `"burst";q=120;w=60`) and
//!   `RateLimit` (the same names with remaining units and seconds to reset, `"burst";r=0;t=12`).
//! - `Retry-After` on 429 and 503; `x-quota-warning` when the daily quota is nearly used up.
//! - `x-ratelimit-network` on a `network` refusal: the network over its budget
//!   (`203.0.113.0/24`, `AS64500`); the `x-ratelimit-limit` trio then describes its window.
//! - Shadow mode: `x-ratelimit-shadow: <action>; reason=<reason>`, what enforcing would have
//!   done (`allow; reason=none`, `delay; reason=daily`, `reject; reason=burst`, …).

use std::cell::RefCell;

use bytes::{BufMut, Bytes, BytesMut};
use http::header::RETRY_AFTER;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use serde_json::Value;

use crate::config::http::HttpSettings;
use crate::edge::render::negotiate::Format;
use crate::edge::render::problem::Problem;
use crate::model::{Action, Decision, LockCause, Reason, WindowKind, WindowState};

pub const X_RATELIMIT_TIER: HeaderName = HeaderName::from_static("x-ratelimit-tier");
pub const X_RATELIMIT_LIMIT_HOUR: HeaderName = HeaderName::from_static("x-ratelimit-limit-hour");
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
pub const X_QUOTA_WARNING: HeaderName = HeaderName::from_static("x-quota-warning");
pub const X_RATELIMIT_SHADOW: HeaderName = HeaderName::from_static("x-ratelimit-shadow");
pub const X_RATELIMIT_NETWORK: HeaderName = HeaderName::from_static("x-ratelimit-network");

/// How problem documents are typed: `about:blank` unless `[http] problem_type_base` is set,
/// then the base with the reason appended. (The `upgrade` sentence comes with the decision.)
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hints {
    pub problem_type_base: Option<String>,
}

impl Hints {
    pub fn from_settings(settings: &HttpSettings) -> Self {
        Hints {
            problem_type_base: settings.problem_type_base.clone(),
        }
    }
}

/// The window the `x-ratelimit-limit/-remaining/-reset` trio describes.
pub fn binding_window(d: &Decision) -> Option<&WindowState> {
    if d.reason() == Some(Reason::Network) {
        if let Some(n) = &d.network {
            return Some(&n.window);
        }
    }
    if let Some(w) = d
        .reason()
        .and_then(Reason::window)
        .and_then(|k| d.window(k))
    {
        return Some(w);
    }
    if d.reason() == Some(Reason::Locked) {
        // A locked caller was stopped by its burst record; name that window when it applied.
        if let Some(w) = d.window(WindowKind::Burst) {
            return Some(w);
        }
    }
    // Fewest units left; on a tie the first (shortest) window, as `min_by_key` keeps the first.
    d.windows.iter().min_by_key(|w| w.remaining)
}

/// Seconds a rejected caller should wait: the engine's figure, else the binding window's reset;
/// never 0 (a 429 saying "retry now" invites a tight loop).
pub fn retry_after(d: &Decision) -> u64 {
    d.retry_after_secs()
        .or_else(|| binding_window(d).map(|w| w.reset_secs))
        .unwrap_or(1)
        .max(1)
}

/// Renders header values into one buffer, so a response's rate-limit headers cost one
/// allocation between them instead of one each (this runs on every proxied request).
struct Values {
    buf: BytesMut,
}

impl Values {
    fn new() -> Self {
        Values {
            buf: BytesMut::with_capacity(256),
        }
    }

    fn num(&mut self, n: u64) -> &mut Self {
        self.buf.put_slice(itoa::Buffer::new().format(n).as_bytes());
        self
    }

    fn str(&mut self, s: &str) -> &mut Self {
        self.buf.put_slice(s.as_bytes());
        self
    }

    /// Everything written since the last call, as one header value.
    fn take(&mut self) -> Option<HeaderValue> {
        // Only digits, ASCII names and punctuation are written; a failure would be a bug, and
        // the header is then left out rather than failing the response.
        HeaderValue::from_maybe_shared(self.buf.split().freeze()).ok()
    }

    /// `"burst";q=120;w=60, "hourly";q=600;w=3600, …`
    fn policy(&mut self, d: &Decision) -> &mut Self {
        for (i, w) in d.windows.iter().enumerate() {
            if i > 0 {
                self.str(", ");
            }
            self.str("\"")
                .str(w.kind.as_str())
                .str("\";q=")
                .num(w.limit);
            self.str(";w=").num(w.window_secs);
        }
        self
    }

    /// `"burst";r=0;t=12, "hourly";r=480;t=1800, …`. On a reject the window that refused says
    /// `r=0` and `t` = `Retry-After` (so the fields agree); on a lockout every window does.
    fn ratelimit(&mut self, d: &Decision) -> &mut Self {
        let rejected = d.action() == Action::Reject;
        let locked = d.reason() == Some(Reason::Locked);
        // A network's refusal names the network's window, not one of the caller's own.
        let binding = if rejected && d.reason() != Some(Reason::Network) {
            binding_window(d).map(|w| w.kind)
        } else {
            None
        };
        for (i, w) in d.windows.iter().enumerate() {
            if i > 0 {
                self.str(", ");
            }
            let (r, t) = if locked {
                (0, retry_after(d).max(w.reset_secs))
            } else if binding == Some(w.kind) {
                (0, retry_after(d))
            } else {
                (w.remaining, w.reset_secs)
            };
            self.str("\"").str(w.kind.as_str()).str("\";r=").num(r);
            self.str(";t=").num(t);
        }
        self
    }

    fn into_string(self) -> String {
        String::from_utf8_lossy(&self.buf).into_owned()
    }
}

/// The `RateLimit-Policy` value: `"burst";q=120;w=60, "hourly";q=600;w=3600, …`
pub fn policy_value(d: &Decision) -> String {
    let mut v = Values::new();
    v.policy(d);
    v.into_string()
}

/// The `RateLimit` value: `"burst";r=0;t=12, "hourly";r=480;t=1800, …`
pub fn ratelimit_value(d: &Decision) -> String {
    let mut v = Values::new();
    v.ratelimit(d);
    v.into_string()
}

/// What a `RateLimit-Policy` value says of each window: kind, quota, window length.
type PolicyShape = Vec<(WindowKind, u64, u64)>;

thread_local! {
    /// The last `RateLimit-Policy` value rendered on this thread and the windows it describes:
    /// callers of one tier on one route share it, so most requests clone it instead.
    static POLICY: RefCell<(PolicyShape, Option<HeaderValue>)> =
        const { RefCell::new((Vec::new(), None)) };
}

/// `RateLimit-Policy` for `d`, from the per-thread memo when the windows match.
fn policy_header(d: &Decision, v: &mut Values) -> Option<HeaderValue> {
    let shape = |w: &WindowState| (w.kind, w.limit, w.window_secs);
    POLICY.with_borrow_mut(|(seen, value)| {
        let same = seen.len() == d.windows.len()
            && seen.iter().zip(&d.windows).all(|(s, w)| *s == shape(w));
        if !same || value.is_none() {
            *value = v.policy(d).take();
            seen.clear();
            seen.extend(d.windows.iter().map(shape));
        }
        value.clone()
    })
}

/// Where rendered rate-limit fields go: a header map, or a response head being written raw.
trait FieldSink {
    /// Adds `name` with the value rendered into `v` since its last take; replaces any earlier
    /// field of that name.
    fn rendered(&mut self, name: HeaderName, v: &mut Values);
    fn value(&mut self, name: HeaderName, value: HeaderValue);
}

impl FieldSink for HeaderMap {
    fn rendered(&mut self, name: HeaderName, v: &mut Values) {
        if let Some(value) = v.take() {
            self.insert(name, value);
        }
    }

    fn value(&mut self, name: HeaderName, value: HeaderValue) {
        self.insert(name, value);
    }
}

/// Header fields as on the wire, `name: value\r\n`. The caller leaves out any field of the
/// same names ([`is_rate_limit_field`]), which is what replacing means here.
impl FieldSink for Vec<u8> {
    fn rendered(&mut self, name: HeaderName, v: &mut Values) {
        self.extend_from_slice(name.as_str().as_bytes());
        self.extend_from_slice(b": ");
        self.extend_from_slice(&v.buf);
        self.extend_from_slice(b"\r\n");
        v.buf.clear();
    }

    fn value(&mut self, name: HeaderName, value: HeaderValue) {
        self.extend_from_slice(name.as_str().as_bytes());
        self.extend_from_slice(b": ");
        self.extend_from_slice(value.as_bytes());
        self.extend_from_slice(b"\r\n");
    }
}

/// Writes the rate-limit headers for `d` into `h` (allowed, delayed and rejected alike).
pub fn write_headers(d: &Decision, h: &mut HeaderMap) {
    render(d, h);
}

/// The same fields as [`write_headers`], appended to `out` as wire lines.
pub fn write_header_lines(d: &Decision, out: &mut Vec<u8>) {
    render(d, out);
}

/// Whether a field named `name` (any case) is one the proxy writes itself, so the upstream's
/// field of that name is replaced rather than passed on beside it.
pub fn is_rate_limit_field(name: &[u8]) -> bool {
    [
        X_RATELIMIT_TIER.as_str(),
        X_RATELIMIT_LIMIT_HOUR.as_str(),
        X_RATELIMIT_LIMIT.as_str(),
        X_RATELIMIT_REMAINING.as_str(),
        X_RATELIMIT_RESET.as_str(),
        RATELIMIT_POLICY.as_str(),
        RATELIMIT.as_str(),
        X_QUOTA_WARNING.as_str(),
        X_RATELIMIT_SHADOW.as_str(),
        X_RATELIMIT_NETWORK.as_str(),
        RETRY_AFTER.as_str(),
    ]
    .iter()
    .any(|n| n.as_bytes().eq_ignore_ascii_case(name))
}

fn render(d: &Decision, h: &mut impl FieldSink) {
    let mut v = Values::new();
    h.value(X_RATELIMIT_TIER, HeaderValue::from_static(d.tier.as_str()));
    let rejected = d.action() == Action::Reject;
    // A refusal (or what would have been one, in shadow mode) names the hourly budget whatever
    // refused it; an admitted request names the one its route counts, and an unmetered route
    // none.
    let refusal = rejected || d.shadowed().is_some_and(|s| s.action() == Action::Reject);
    let counted = d
        .windows
        .iter()
        .any(|w| matches!(w.kind, WindowKind::Hourly | WindowKind::KeyHourly));
    if let Some(limit) = d.hourly_limit().filter(|_| refusal || counted) {
        v.num(limit);
        h.rendered(X_RATELIMIT_LIMIT_HOUR, &mut v);
    }
    if let Some(w) = binding_window(d) {
        v.num(w.limit);
        h.rendered(X_RATELIMIT_LIMIT, &mut v);
        let remaining = if rejected { 0 } else { w.remaining };
        v.num(remaining);
        h.rendered(X_RATELIMIT_REMAINING, &mut v);
        let reset = if rejected {
            retry_after(d)
        } else {
            w.reset_secs
        };
        v.num(reset);
        h.rendered(X_RATELIMIT_RESET, &mut v);
    } else if rejected && d.reason() != Some(Reason::Overload) {
        // A shed spends nothing: it says nothing about what is left.
        v.num(0);
        h.rendered(X_RATELIMIT_REMAINING, &mut v);
        v.num(retry_after(d));
        h.rendered(X_RATELIMIT_RESET, &mut v);
    }
    if !d.windows.is_empty() {
        if let Some(policy) = policy_header(d, &mut v) {
            h.value(RATELIMIT_POLICY, policy);
        }
        v.ratelimit(d);
        h.rendered(RATELIMIT, &mut v);
    }
    if let Some(left) = d.warn_remaining {
        v.num(left).str(" units left today");
        h.rendered(X_QUOTA_WARNING, &mut v);
    }
    if rejected {
        v.num(retry_after(d));
        h.rendered(RETRY_AFTER, &mut v);
    }
    if let (Some(Reason::Network), Some(n)) = (d.reason(), &d.network) {
        v.str(&n.name.to_string());
        h.rendered(X_RATELIMIT_NETWORK, &mut v);
    }
    if let Some(s) = d.shadowed() {
        v.str(s.action().as_str())
            .str("; reason=")
            .str(s.reason().map_or("none", Reason::as_str));
        h.rendered(X_RATELIMIT_SHADOW, &mut v);
    }
}

/// The `detail` sentence of a 429: what was exceeded and when it frees up.
pub fn detail(d: &Decision) -> String {
    let tier = d.tier.as_str();
    let wait = retry_after(d);
    let w = binding_window(d);
    let limit = w.map(|w| w.limit);
    match (d.reason(), limit) {
        // An unattributed caller (`via:`) is never struck: its burst is shared by every request
        // whose forwarding field named no client.
        (Some(Reason::Burst), Some(n)) if d.identity.starts_with("via:") => format!(
            "More than {n} units in 60 seconds from callers this proxy could not name (tier \
             {tier}); they share one budget and are never locked out. Retry in {wait} s."
        ),
        (Some(Reason::Burst), Some(n)) => format!(
            "More than {n} units in 60 seconds from this caller (tier {tier}); repeated bursts \
             lead to a lockout. Retry in {wait} s."
        ),
        (Some(Reason::Hourly), Some(n)) => format!(
            "The hourly budget of {n} units for tier {tier} is used up; it renews at the top of \
             the UTC hour, in {wait} s."
        ),
        (Some(Reason::Daily), Some(n)) => format!(
            "The daily quota of {n} units for tier {tier} is used up; it renews at 00:00 UTC, \
             in {wait} s."
        ),
        (Some(Reason::KeyHourly), Some(n)) => format!(
            "This API key's hourly limit of {n} units on this route is used up; it renews at the \
             top of the UTC hour, in {wait} s."
        ),
        (Some(Reason::Locked), _) if d.lock_cause == Some(LockCause::Network) => format!(
            "This caller is locked out after a burst from its network; the lockout ends in \
             {wait} s. Retrying earlier extends nothing but is refused."
        ),
        (Some(Reason::Locked), _) if d.lock_cause == Some(LockCause::Manual) => format!(
            "This caller is locked out by the operator; the lockout ends in {wait} s. \
             Retrying earlier extends nothing but is refused."
        ),
        (Some(Reason::Locked), _) => format!(
            "This caller is locked out after repeated bursts; the lockout ends in {wait} s. \
             Retrying earlier extends nothing but is refused."
        ),
        (Some(Reason::Network), Some(n)) => {
            let (name, what) = match &d.network {
                Some(net) => (
                    net.name.to_string(),
                    if net.window.kind == WindowKind::Burst {
                        format!("sent more than {n} requests in 60 seconds")
                    } else {
                        format!("used up its hourly budget of {n} units")
                    },
                ),
                None => (
                    "this caller's network".to_string(),
                    format!("went over {n} units"),
                ),
            };
            format!(
                "Many addresses of the network {name} together {what}: the {tier} callers \
                 there share it (each tier has its own share of a network, and a verified API \
                 key is not counted against it). Retry in {wait} s."
            )
        }
        (Some(Reason::Overload), _) => format!(
            "The application is at capacity, and requests of tier {tier} are turned away first \
             until it recovers; this costs none of your budget. Retry in {wait} s."
        ),
        (Some(Reason::Unavailable), _) => format!(
            "The rate limiter's shared store is unavailable, and this service refuses requests \
             while it is rather than count them locally. Retry in {wait} s."
        ),
        (Some(r), None) => format!(
            "Rate limit ({}) exceeded for tier {tier}; retry in {wait} s.",
            r.as_str()
        ),
        (None, _) => format!("Rate limit exceeded for tier {tier}; retry in {wait} s."),
    }
}

/// The 429 problem document's members (also returned by `/v1/decide` for rejects).
pub fn problem(d: &Decision, hints: &Hints) -> Problem {
    let reason = d.reason().map(Reason::as_str).unwrap_or("burst");
    let type_uri = hints
        .problem_type_base
        .as_ref()
        .map(|b| format!("{b}{reason}"));
    // A store outage under `on_failure = "closed"` and an overloaded upstream are not the
    // caller's doing.
    let status = if matches!(d.reason(), Some(Reason::Unavailable | Reason::Overload)) {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let p = Problem::new(status, type_uri, detail(d));
    // A network's refusal names the network (only then: other 429s carry no such member).
    let p = match (d.reason(), &d.network) {
        (Some(Reason::Network), Some(n)) => p.with("network", n.name.to_string()),
        _ => p,
    };
    p.with("tier", d.tier.as_str())
        .with(
            "hourlyLimit",
            d.hourly_limit().map(Value::from).unwrap_or(Value::Null),
        )
        .with("reason", reason)
        .with("retryAfter", retry_after(d))
        .with(
            "upgrade",
            d.upgrade.as_deref().map(Value::from).unwrap_or(Value::Null),
        )
}

/// The full 429 answer for a rejecting decision, its body in `format` (problem+json, or the
/// HTML page for a browser).
pub fn rejection(d: &Decision, hints: &Hints, format: Format) -> Response<Bytes> {
    let mut resp = super::page::respond(problem(d, hints), format);
    write_headers(d, resp.headers_mut());
    resp
}

/// `503` for a delayed request that cannot be held (too many held already), counted by the
/// caller. `Retry-After` is the delay it would have waited.
pub fn hold_overflow(d: &Decision, format: Format) -> Response<Bytes> {
    held_503(d, d.delay(), format, |wait| {
        format!(
            "This caller is over its daily quota, so each request is held for a scan delay, and \
             too many of its requests are held already. Retry in {wait} s, one request at a \
             time."
        )
    })
}

/// `503` for a request still held when the shutdown grace period ended: it gets an answer
/// before its connection closes, never an empty reply. `Retry-After` is what was left of its
/// delay: it was to wait that long anyway, and retrying sooner is only held again.
pub fn hold_cut_short(d: &Decision, left: std::time::Duration) -> Response<Bytes> {
    held_503(d, left, Format::Problem, |wait| {
        format!(
            "This request was held for a scan delay (the caller is over its daily quota) and the \
             proxy is shutting down before the delay was over. Retry in {wait} s."
        )
    })
}

/// A 503 about a held request: `Retry-After` and `retryAfter` are `wait` in whole seconds (at
/// least 1), with the decision's rate-limit fields.
fn held_503(
    d: &Decision,
    wait: std::time::Duration,
    format: Format,
    detail: impl FnOnce(u64) -> String,
) -> Response<Bytes> {
    let wait = wait.as_secs_f64().ceil().max(1.0) as u64;
    let problem = Problem::new(StatusCode::SERVICE_UNAVAILABLE, None, detail(wait))
        .with("tier", d.tier.as_str())
        .with("retryAfter", wait);
    let mut resp = super::page::respond(problem, format);
    write_headers(d, resp.headers_mut());
    resp.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(wait));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Tier;
    use std::time::Duration;

    fn win(
        kind: WindowKind,
        limit: u64,
        remaining: u64,
        window_secs: u64,
        reset_secs: u64,
    ) -> WindowState {
        WindowState {
            kind,
            limit,
            remaining,
            window_secs,
            reset_secs,
        }
    }

    fn decision(action: Action, reason: Option<Reason>) -> Decision {
        let mut d = Decision::builder(Tier::Anon, "ip:abc")
            .window(win(WindowKind::Burst, 120, 0, 60, 12))
            .window(win(WindowKind::Hourly, 600, 480, 3600, 1800))
            .window(win(WindowKind::Daily, 1000, 880, 86400, 40000))
            .cost(1)
            .build();
        match (action, reason) {
            (Action::Reject, Some(reason)) => d.reject(reason, 12),
            (Action::Delay, _) => d.hold(Duration::ZERO, crate::model::DelayKind::Soft),
            _ => {}
        }
        d
    }

    #[test]
    fn policy_and_ratelimit_fields_name_every_window() {
        let d = decision(Action::Reject, Some(Reason::Burst));
        assert_eq!(
            policy_value(&d),
            "\"burst\";q=120;w=60, \"hourly\";q=600;w=3600, \"daily\";q=1000;w=86400"
        );
        assert_eq!(
            ratelimit_value(&d),
            "\"burst\";r=0;t=12, \"hourly\";r=480;t=1800, \"daily\";r=880;t=40000"
        );
    }

    #[test]
    fn the_policy_memo_follows_the_windows() {
        let policy = |d: &Decision| {
            let mut h = HeaderMap::new();
            write_headers(d, &mut h);
            h[&RATELIMIT_POLICY].to_str().unwrap().to_string()
        };
        let mut d = decision(Action::Allow, None);
        let first = policy(&d);
        assert_eq!(first, policy_value(&d));
        assert_eq!(policy(&d), first, "from the memo");
        d.windows[1].limit = 6000;
        assert_eq!(policy(&d), policy_value(&d));
        assert!(policy(&d).contains("q=6000"));
        d.windows.pop();
        assert_eq!(policy(&d), "\"burst\";q=120;w=60, \"hourly\";q=6000;w=3600");
    }

    #[test]
    fn binding_window_follows_reason_then_fewest_remaining() {
        let mut d = decision(Action::Reject, Some(Reason::Hourly));
        assert_eq!(binding_window(&d).unwrap().kind, WindowKind::Hourly);
        d.allow();
        assert_eq!(binding_window(&d).unwrap().kind, WindowKind::Burst);
        d.windows[0].remaining = 900;
        assert_eq!(binding_window(&d).unwrap().kind, WindowKind::Hourly);
    }

    #[test]
    fn shadow_mode_says_what_would_have_happened() {
        let shadow = |d: Decision| {
            let mut h = HeaderMap::new();
            write_headers(&d, &mut h);
            assert!(!h.contains_key(RETRY_AFTER), "an allow: {h:?}");
            h[&X_RATELIMIT_SHADOW].to_str().unwrap().to_string()
        };
        let mut d = decision(Action::Reject, Some(Reason::Burst));
        d.shadow(true);
        assert_eq!(d.action(), Action::Allow);
        assert_eq!(shadow(d), "reject; reason=burst");
        let mut d = decision(Action::Allow, None);
        d.hold(Duration::from_secs(5), crate::model::DelayKind::Soft);
        d.shadow(false);
        assert_eq!(shadow(d), "delay; reason=daily");
        let mut d = decision(Action::Allow, None);
        d.shadow(false);
        assert_eq!(shadow(d), "allow; reason=none");
        let mut h = HeaderMap::new();
        write_headers(&decision(Action::Allow, None), &mut h);
        assert!(!h.contains_key(X_RATELIMIT_SHADOW), "only in shadow mode");
        assert!(is_rate_limit_field(b"X-RateLimit-Shadow"));
    }

    #[test]
    fn a_locked_429_names_the_hourly_budget() {
        let d = Decision::builder(Tier::Anon, "ip:abc")
            .hourly_budget(600)
            .reject(Reason::Locked, 30)
            .build();
        let mut h = HeaderMap::new();
        write_headers(&d, &mut h);
        assert_eq!(h[&X_RATELIMIT_LIMIT_HOUR], "600");
        let p = problem(&d, &Hints::default()).to_value();
        assert_eq!(p["hourlyLimit"], 600);
    }

    #[test]
    fn the_hourly_budget_is_named_on_every_refusal_and_where_the_route_counts_it() {
        let header = |d: &Decision| {
            let mut h = HeaderMap::new();
            write_headers(d, &mut h);
            h.get(X_RATELIMIT_LIMIT_HOUR)
                .map(|v| v.to_str().unwrap().to_string())
        };
        // A route counting the burst alone: a refusal names the caller's hourly budget...
        let burst_only = || {
            Decision::builder(Tier::Anon, "ip:abc")
                .hourly_budget(600)
                .window(win(WindowKind::Burst, 120, 0, 60, 12))
        };
        let d = burst_only().reject(Reason::Burst, 12).build();
        assert_eq!(header(&d).as_deref(), Some("600"));
        assert_eq!(
            problem(&d, &Hints::default()).to_value()["hourlyLimit"],
            600
        );
        assert_eq!(
            header(&burst_only().reject(Reason::Burst, 12).shadow(true).build()).as_deref(),
            Some("600"),
            "what would have been a refusal"
        );
        // ...an admitted request there names none, as an unmetered route names none.
        assert_eq!(header(&burst_only().build()), None);
        let unmetered = Decision::builder(Tier::Anon, "ip:abc")
            .hourly_budget(600)
            .build();
        assert_eq!(header(&unmetered), None);
        // Where the route counts it, every response names it.
        assert_eq!(
            header(&decision(Action::Allow, None)).as_deref(),
            Some("600")
        );
    }

    #[test]
    fn retry_after_is_never_zero() {
        let mut d = decision(Action::Reject, Some(Reason::Burst));
        d.reject(Reason::Burst, 0);
        assert_eq!(retry_after(&d), 1);
    }

    #[test]
    fn overflow_retry_after_rounds_delay_up() {
        let mut d = decision(Action::Delay, None);
        d.hold(Duration::from_millis(5_001), crate::model::DelayKind::Soft);
        let resp = hold_overflow(&d, Format::Problem);
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[RETRY_AFTER], "6");
    }
}
