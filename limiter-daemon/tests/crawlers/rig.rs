//! What the crawler tests on the real daemon share: one `/v1/decide` call with a user
//! agent, a `/metrics` scrape, and a series' value read from the text.

#![allow(
    dead_code,
    reason = "each test file uses a different part of this module"
)]

use std::net::SocketAddr;

use limiter_tests::client::exchange as http;
use std::time::Duration;

/// `/v1/decide` for `ip` with `user_agent` (none when empty): the answer's JSON.
pub fn decide(api: SocketAddr, ip: &str, user_agent: &str) -> serde_json::Value {
    let headers = if user_agent.is_empty() {
        serde_json::json!({})
    } else {
        serde_json::json!({ "user-agent": user_agent })
    };
    let body = serde_json::json!({ "ip": ip, "path": "/", "headers": headers }).to_string();
    let (status, text) = limiter_tests::poll(Duration::from_secs(20), "/v1/decide", || {
        http(api, "POST", "/v1/decide", &body)
    });
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// The tier `/v1/decide` answers for `ip` with `user_agent`, checked against the
/// `x-ratelimit-tier` header it would send.
pub fn tier(api: SocketAddr, ip: &str, user_agent: &str) -> String {
    let d = decide(api, ip, user_agent);
    let tier = d["tier"].as_str().unwrap().to_string();
    assert_eq!(d["headers"]["x-ratelimit-tier"], tier.as_str(), "{d}");
    tier
}

/// The `/metrics` text.
pub fn scrape(metrics: SocketAddr) -> String {
    let (status, text) = limiter_tests::poll(Duration::from_secs(20), "/metrics", || {
        http(metrics, "GET", "/metrics", "")
    });
    assert_eq!(status, 200);
    text
}

/// The value of the series written exactly `series` (name and labels), 0 when absent.
pub fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

pub const GOOGLEBOT: &str =
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
