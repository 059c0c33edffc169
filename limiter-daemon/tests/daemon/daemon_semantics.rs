//! The real `limiter-daemon` binary, started from outside with a config file and driven over
//! sockets, on both proxy paths (the own HTTP/1.1 loop and hyper's, `max_header_count = 128`, more fields than the loop parses):
//! shadow mode (`[engine] shadow = true`) admits everything and says what would have happened
//! (proxy header, `/v1/decide`'s `shadow`, metrics labelled `shadow="true"`); enforcing, a
//! forged cookie is delayed at `L_anon + 1`, and a `locked` 429 says what every 429 says.

use crate::http_support;

use std::net::{SocketAddr, TcpStream};
use std::path::Path;

use http::{Method, Request, StatusCode};
use http_support::{body, get, header, json, send, start_upstream, wait_until};
use limiter_tests::daemon::Daemon;
use limiter_tests::free_addr;
use serde_json::Value;

struct Addrs {
    api: SocketAddr,
    proxy: SocketAddr,
    metrics: SocketAddr,
}

/// Starts the binary on `extra` plus the listeners, the upstream and the state directory.
async fn daemon(dir: &Path, upstream: SocketAddr, own_loop: bool, extra: &str) -> (Daemon, Addrs) {
    // More fields than the own loop parses: every request takes hyper's server.
    let hyper_only = if own_loop {
        ""
    } else {
        "max_header_count = 128\n"
    };
    let a = Addrs {
        api: free_addr(),
        proxy: free_addr(),
        metrics: free_addr(),
    };
    let text = format!(
        "{extra}\n[kernel]\nmode = \"off\"\n[store]\nstate_dir = \"{state}\"\n\
         [admin]\nlisten = \"\"\n[http]\napi_listen = [\"{api}\"]\nproxy_listen = [\"{proxy}\"]\n\
         upstream = \"http://{upstream}\"\n{hyper_only}\
         [metrics]\nlisten = \"{metrics}\"\n",
        state = dir.join("state").display(),
        api = a.api,
        proxy = a.proxy,
        metrics = a.metrics,
    );
    let d = Daemon::run(dir, &text, &[], a.api);
    for addr in [a.api, a.proxy, a.metrics] {
        wait_until("the daemon listens", || TcpStream::connect(addr).is_ok()).await;
    }
    (d, a)
}

async fn decide(api: SocketAddr, ip: &str, path: &str, headers: Value) -> Value {
    let req = Request::builder()
        .method(Method::POST)
        .uri(format!("http://{api}/v1/decide"))
        .header("content-type", "application/json")
        .body(body(
            serde_json::json!({ "ip": ip, "method": "GET", "path": path, "headers": headers })
                .to_string(),
        ))
        .unwrap();
    let (parts, bytes) = send(req).await;
    assert_eq!(parts.status, StatusCode::OK);
    json(&bytes)
}

async fn scrape(metrics: SocketAddr) -> String {
    let (_, bytes) = get(&format!("http://{metrics}/metrics"), &[]).await;
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn series(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no series {name} in:\n{text}"))
}

async fn shadow_mode_admits_and_labels(own_loop: bool) {
    let up = start_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (_d, a) = daemon(
        dir.path(),
        up.addr,
        own_loop,
        "[engine]\nshadow = true\n[tiers.anon]\nburst = 3\n",
    )
    .await;

    // Through the proxy: all five reach the upstream; the 4th and 5th say "would be a burst".
    let mut said = Vec::new();
    for _ in 0..5 {
        let (parts, bytes) = get(&format!("http://{}/", a.proxy), &[]).await;
        assert_eq!((parts.status, &bytes[..]), (StatusCode::OK, &b"ok"[..]));
        said.push(header(&parts, "x-ratelimit-shadow").to_string());
    }
    assert_eq!(
        said,
        [
            "allow; reason=none",
            "allow; reason=none",
            "allow; reason=none",
            "reject; reason=burst",
            "reject; reason=burst"
        ]
    );

    // The decision API: an allow, and what enforcing would have done.
    for _ in 0..3 {
        decide(a.api, "203.0.113.9", "/", Value::Null).await;
    }
    let v = decide(a.api, "203.0.113.9", "/", Value::Null).await;
    assert_eq!(v["action"], "allow", "{v}");
    assert_eq!(v["delayMs"], 0, "{v}");
    assert_eq!(
        v["shadow"],
        serde_json::json!({ "action": "reject", "reason": "burst", "delayMs": 0 }),
        "{v}"
    );
    assert_eq!(v["headers"]["x-ratelimit-shadow"], "reject; reason=burst");

    // Counted with shadow="true"; the strikes that would have been made, none made.
    let t = scrape(a.metrics).await;
    let rejected =
        r#"limiter_decisions_total{tier="anon",action="reject",reason="burst",shadow="true"}"#;
    assert_eq!(series(&t, rejected), 3.0);
    let allowed =
        r#"limiter_decisions_total{tier="anon",action="allow",reason="none",shadow="true"}"#;
    assert_eq!(series(&t, allowed), 6.0);
    assert_eq!(series(&t, "limiter_shadow_strikes_total"), 3.0);
    assert_eq!(series(&t, "limiter_strikes_total"), 0.0);
    assert_eq!(
        up.state.requests.load(std::sync::atomic::Ordering::SeqCst),
        5
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_through_the_real_daemon_own_loop() {
    shadow_mode_admits_and_labels(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_through_the_real_daemon_hyper_path() {
    shadow_mode_admits_and_labels(false).await;
}

async fn every_429_says_the_same_things(own_loop: bool) {
    let up = start_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (_d, a) = daemon(
        dir.path(),
        up.addr,
        own_loop,
        "[tiers.anon]\nburst = 3\n[tiers.session]\nmultiplier = 4\n[quota]\nanon = 2\n\
         [[routes]]\nprefix = \"/scan\"\nlimits = [\"daily\"]\nover_quota = \"delay\"\n\
         [default_route]\nlimits = [\"burst\", \"hourly\"]\n",
    )
    .await;

    // A forged cookie buys no scan quota: delayed at L_anon + 1.
    let cookie = serde_json::json!({ "cookie": "session=forged" });
    for _ in 0..2 {
        let v = decide(a.api, "203.0.113.20", "/scan", cookie.clone()).await;
        assert_eq!(
            (&v["action"], &v["tier"]),
            (&Value::from("allow"), &Value::from("session"))
        );
    }
    let v = decide(a.api, "203.0.113.20", "/scan", cookie).await;
    assert_eq!(
        (&v["action"], &v["delayMs"]),
        (&Value::from("delay"), &Value::from(5000)),
        "{v}"
    );

    // Through the proxy: three served, a burst 429, then a locked 429 with the same members.
    for n in 0..3 {
        let (parts, bytes) = get(&format!("http://{}/", a.proxy), &[]).await;
        assert_eq!(parts.status, StatusCode::OK, "request {n}: {bytes:?}");
    }
    let (parts, bytes) = get(&format!("http://{}/", a.proxy), &[]).await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    let burst = json(&bytes);
    assert_eq!(burst["reason"], "burst");
    let (parts, bytes) = get(&format!("http://{}/", a.proxy), &[]).await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    let locked = json(&bytes);
    assert_eq!(locked["reason"], "locked", "{locked}");
    assert_eq!(locked["hourlyLimit"], 600, "{locked}");
    assert_eq!(locked["hourlyLimit"], burst["hourlyLimit"]);
    assert_eq!(header(&parts, "x-ratelimit-limit-hour"), "600");
    assert_eq!(header(&parts, "x-ratelimit-tier"), "anon");
    let upgrade = locked["upgrade"].as_str().unwrap();
    assert!(upgrade.contains("4x the anonymous budget"), "{upgrade}");

    // /v1/auth (the client is the peer, 127.0.0.1, locked above) says the same.
    let (parts, _) = get(
        &format!("http://{}/v1/auth", a.api),
        &[("x-original-uri", "/")],
    )
    .await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&parts, "x-ratelimit-limit-hour"), "600");

    // /v1/decide for a locked caller: the problem document and the headers.
    for _ in 0..4 {
        decide(a.api, "203.0.113.21", "/", Value::Null).await;
    }
    let v = decide(a.api, "203.0.113.21", "/", Value::Null).await;
    assert_eq!(v["reason"], "locked", "{v}");
    assert_eq!(v["problem"]["hourlyLimit"], 600, "{v}");
    assert_eq!(v["headers"]["x-ratelimit-limit-hour"], "600", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_429_says_the_same_things_own_loop() {
    every_429_says_the_same_things(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_429_says_the_same_things_hyper_path() {
    every_429_says_the_same_things(false).await;
}

/// Burst 10 and hourly 5 for anonymous callers; `/b` counts the burst alone and `/d` the daily
/// quota alone (2), so a 429 there has no hourly window of its own; a /24 shares 12 units an
/// hour.
const EVERY_REASON: &str = "[tiers.anon]\nburst = 10\nhourly = 5\n[quota]\nanon = 2\n\
    [networks.prefix]\nhourly = 12\n\
    [[routes]]\nprefix = \"/b\"\nlimits = [\"burst\"]\n\
    [[routes]]\nprefix = \"/d\"\nlimits = [\"daily\"]\nover_quota = \"reject\"\n\
    [default_route]\nlimits = [\"burst\", \"hourly\"]\n";

/// A navigation's `Accept`, as Chromium sends it.
const BROWSER: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

/// Sends `/v1/decide` for `ip` on `path` until it is refused; the answer that refused.
async fn decide_until_refused(api: SocketAddr, ip: &str, path: &str) -> Value {
    for _ in 0..20 {
        let v = decide(api, ip, path, Value::Null).await;
        if v["action"] == "reject" {
            return v;
        }
    }
    panic!("{ip} on {path} was never refused");
}

fn names_tier_and_hourly_limit(parts: &http::response::Parts, reason: &str) {
    let h = &parts.headers;
    assert_eq!(
        parts.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{reason}: {h:?}"
    );
    assert_eq!(header(parts, "x-ratelimit-tier"), "anon", "{reason}: {h:?}");
    assert_eq!(
        header(parts, "x-ratelimit-limit-hour"),
        "5",
        "{reason}: {h:?}"
    );
}

/// Issue 35, seed conformance: a `locked` 429 had the tier but not `x-ratelimit-limit-hour`.
/// Every 429 carries `x-ratelimit-tier` and `x-ratelimit-limit-hour`, and `tier` and
/// `hourlyLimit` in its body, whatever its reason and whatever windows its route counts: through
/// the proxy, `/v1/decide` and `/v1/auth`.
async fn every_429_names_the_tier_and_the_hourly_limit(own_loop: bool) {
    let up = start_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (_d, a) = daemon(dir.path(), up.addr, own_loop, EVERY_REASON).await;

    // `/v1/decide`, one reason each, each caller in a /24 of its own.
    let mut reasons = vec![
        (
            "burst",
            decide_until_refused(a.api, "192.0.2.1", "/b").await,
        ),
        (
            "locked",
            decide(a.api, "192.0.2.1", "/b", Value::Null).await,
        ),
        (
            "hourly",
            decide_until_refused(a.api, "198.18.0.1", "/").await,
        ),
        (
            "daily",
            decide_until_refused(a.api, "198.18.1.1", "/d").await,
        ),
    ];
    for i in 0..6 {
        for ip in ["198.51.100.1", "198.51.100.2"] {
            let v = decide(a.api, ip, "/b", Value::Null).await;
            assert_eq!(v["action"], "allow", "{ip} #{i}: {v}");
        }
    }
    reasons.push((
        "network",
        decide(a.api, "198.51.100.3", "/b", Value::Null).await,
    ));
    for (reason, v) in &reasons {
        assert_eq!(v["reason"], *reason, "{v}");
        assert_eq!(v["headers"]["x-ratelimit-tier"], "anon", "{reason}: {v}");
        assert_eq!(v["headers"]["x-ratelimit-limit-hour"], "5", "{reason}: {v}");
        assert_eq!(
            (&v["problem"]["tier"], &v["problem"]["hourlyLimit"]),
            (&Value::from("anon"), &Value::from(5)),
            "{reason}: {v}"
        );
    }

    // `/v1/auth` (nginx's fields; the loopback peer is trusted for `X-Real-IP`): the same
    // callers, refused for the same reasons.
    for (ip, uri, reason) in [
        ("192.0.2.1", "/b", "locked"),
        ("198.18.0.1", "/", "hourly"),
        ("198.18.1.1", "/d", "daily"),
        ("198.51.100.4", "/b", "network"),
    ] {
        let (parts, bytes) = get(
            &format!("http://{}/v1/auth", a.api),
            &[("x-real-ip", ip), ("x-original-uri", uri)],
        )
        .await;
        names_tier_and_hourly_limit(&parts, reason);
        let p = json(&bytes);
        assert_eq!(p["reason"], reason, "{p}");
        assert_eq!(
            (&p["tier"], &p["hourlyLimit"]),
            (&Value::from("anon"), &Value::from(5))
        );
    }

    // The proxy (the client is 127.0.0.1): a burst on `/b`, then locked.
    let url = format!("http://{}/b", a.proxy);
    for n in 0..10 {
        let (parts, _) = get(&url, &[]).await;
        assert_eq!(parts.status, StatusCode::OK, "request {n}");
    }
    for reason in ["burst", "locked"] {
        let (parts, bytes) = get(&url, &[]).await;
        names_tier_and_hourly_limit(&parts, reason);
        let p = json(&bytes);
        assert_eq!(p["reason"], reason, "{p}");
        assert_eq!(
            (&p["tier"], &p["hourlyLimit"]),
            (&Value::from("anon"), &Value::from(5))
        );
    }

    // A browser gets the same 429 as a page; `*/*` and API clients keep problem+json.
    let (parts, bytes) = get(&url, &[("accept", BROWSER)]).await;
    names_tier_and_hourly_limit(&parts, "locked, as a page");
    browser_page(&parts, &bytes, "locked", "/login");
    for accept in ["*/*", "application/json"] {
        let (parts, _) = get(&url, &[("accept", accept)]).await;
        assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            header(&parts, "content-type"),
            "application/problem+json",
            "{accept}"
        );
        assert_eq!(header(&parts, "vary"), "accept");
    }
    // Forward auth as Caddy and Traefik ask (they hand a refusal to the client as it is).
    let (parts, bytes) = get(
        &format!("http://{}/v1/auth", a.api),
        &[
            ("x-forwarded-for", "198.18.0.1"),
            ("x-forwarded-method", "GET"),
            ("x-forwarded-uri", "/"),
            ("x-forwarded-host", "example.org"),
            ("x-forwarded-proto", "https"),
            ("accept", BROWSER),
        ],
    )
    .await;
    names_tier_and_hourly_limit(&parts, "hourly, as a page");
    browser_page(&parts, &bytes, "hourly", "/login");
    // nginx replays the problem document from a header field: still JSON.
    let p: Value = serde_json::from_str(header(&parts, "x-limiter-problem")).unwrap();
    assert_eq!(p["reason"], "hourly");
}

/// `bytes` is the 429 page: HTML with a strict policy of its own, loading nothing, saying when
/// to come back in words, the reason, the tier, the hourly limit and where to upgrade.
fn browser_page(parts: &http::response::Parts, bytes: &bytes::Bytes, reason: &str, upgrade: &str) {
    assert_eq!(header(parts, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(parts, "vary"), "accept");
    let csp = header(parts, "content-security-policy");
    assert!(
        csp.starts_with("default-src 'none'; style-src 'sha256-"),
        "{csp}"
    );
    let html = std::str::from_utf8(bytes).unwrap();
    assert!(html.starts_with("<!doctype html>"), "{html}");
    for external in ["<script", "src=", "http://", "https://"] {
        assert!(!html.contains(external), "{external}: {html}");
    }
    let retry: u64 = header(parts, "retry-after").parse().unwrap();
    let words = match retry {
        0..=59 => format!("{retry} second"),
        60..=3540 => format!("{} minute", retry.div_ceil(60)),
        _ => "1 hour".to_string(),
    };
    assert!(
        html.contains(&format!("Please come back in <strong>{words}")),
        "{words}: {html}"
    );
    for fact in [
        format!("<dd>{reason}</dd>"),
        "<dd>anon</dd>".to_string(),
        "<dd>5 units</dd>".to_string(),
        format!("<a href=\"{upgrade}\">{upgrade}</a>"),
    ] {
        assert!(html.contains(&fact), "{fact}: {html}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_429_names_the_tier_and_the_hourly_limit_own_loop() {
    every_429_names_the_tier_and_the_hourly_limit(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_429_names_the_tier_and_the_hourly_limit_hyper_path() {
    every_429_names_the_tier_and_the_hourly_limit(false).await;
}
