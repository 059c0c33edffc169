//! The response contract on real responses, decided by the real engine (embedded store, manual
//! clock) behind the reverse proxy, `/v1/auth` and `/v1/decide`, with a real upstream: every
//! 429 field and header for each tier (anonymous, session cookie, token holder, API key,
//! invented key) and each reason (burst, hourly, daily reject, key hourly, locked), and the
//! delay mode with delays scaled down by config.

use crate::http_support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::StatusCode;
use http_support::*;
use limiter_daemon::clock::ManualClock;
use limiter_daemon::config::{Config, EnvMap};
use limiter_daemon::engine::keys::IssueKey;
use limiter_daemon::engine::Engine;

/// 2026-11-29T10:00:30Z: 3570 s to the next UTC hour, 50370 s to the next UTC day.
const T0: u64 = 1_795_946_430_000;
const TO_HOUR: u64 = 3570;
const TO_DAY: u64 = 50370;
const JWT_SECRET: &str = "http-engine-test-secret-0123456789";

const LADDER: &str = r#"
[tiers.anon]
burst = 2
hourly = 3
[tiers.session]
burst = 10
multiplier = 1
[tiers.sponsor]
burst = 50
hourly = 100
[quota]
anon = 1000
token = 2
[default_route]
limits = ["burst", "hourly"]
[[routes]]
prefix = "/daily"
over_quota = "reject"
[[routes]]
prefix = "/api/feeds"
limits = ["burst", "hourly"]
key_limit = true
[jwt]
algorithm = "HS256"
secret = "http-engine-test-secret-0123456789"
[lockout]
base = "60s"
"#;

struct World {
    engine: Arc<Engine>,
    clock: ManualClock,
    _state: tempfile::TempDir,
    up: TestUpstream,
    d: Running,
}

async fn world(config: &str, http_extra: &str) -> World {
    let state = tempfile::tempdir().unwrap();
    let text = format!(
        "{config}\n[store]\nstate_dir = \"{}\"\n",
        state.path().display()
    );
    let cfg = Config::from_toml_str(&text, Path::new("test.toml"), &EnvMap::new()).unwrap();
    let clock = ManualClock::new(T0);
    let engine = manual_engine(cfg, &clock, T0);
    let up = start_upstream().await;
    let d = start(settings(Some(up.addr), http_extra), engine.clone()).await;
    World {
        engine,
        clock,
        _state: state,
        up,
        d,
    }
}

fn policy(windows: &[(&str, u64, u64)]) -> String {
    windows
        .iter()
        .map(|(n, q, w)| format!("\"{n}\";q={q};w={w}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn jwt(sub: &str) -> String {
    let claims =
        serde_json::json!({"sub": sub, "jti": format!("{sub}-jti"), "exp": 4_102_444_800u64});
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()),
    )
    .unwrap()
}

/// Everything a 429 must say, checked on a real response.
struct Expect<'a> {
    tier: &'a str,
    reason: &'a str,
    retry: u64,
    hourly_limit: u64,
    /// `x-ratelimit-limit`: the window the reason names.
    limit: u64,
    policy: String,
    /// The `RateLimit` item of the binding window.
    ratelimit_item: String,
    upgrade: Option<&'a str>,
}

fn assert_429(parts: &http::response::Parts, body: &bytes::Bytes, e: &Expect<'_>) {
    let ctx = format!("{} {}: {:?}", e.tier, e.reason, parts.headers);
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS, "{ctx}");
    assert_eq!(header(parts, "content-type"), "application/problem+json");
    assert_eq!(header(parts, "retry-after"), e.retry.to_string(), "{ctx}");
    assert_eq!(header(parts, "x-ratelimit-tier"), e.tier, "{ctx}");
    assert_eq!(
        header(parts, "x-ratelimit-limit-hour"),
        e.hourly_limit.to_string(),
        "{ctx}"
    );
    assert_eq!(
        header(parts, "x-ratelimit-limit"),
        e.limit.to_string(),
        "{ctx}"
    );
    assert_eq!(header(parts, "x-ratelimit-remaining"), "0", "{ctx}");
    assert_eq!(
        header(parts, "x-ratelimit-reset"),
        e.retry.to_string(),
        "{ctx}"
    );
    assert_eq!(header(parts, "ratelimit-policy"), e.policy, "{ctx}");
    let rl = header(parts, "ratelimit");
    assert!(
        rl.split(", ").any(|item| item == e.ratelimit_item),
        "{ctx}: RateLimit {rl:?} lacks {:?}",
        e.ratelimit_item
    );
    let v = json(body);
    assert_eq!(v["type"], "about:blank");
    assert_eq!(v["title"], "Too Many Requests");
    assert_eq!(v["status"], 429);
    let detail = v["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("{} s", e.retry)),
        "{ctx}: detail {detail:?}"
    );
    assert_eq!(v["tier"], e.tier);
    assert_eq!(v["hourlyLimit"], e.hourly_limit);
    assert_eq!(v["reason"], e.reason);
    assert_eq!(v["retryAfter"], e.retry);
    match e.upgrade {
        Some(path) => {
            let u = v["upgrade"]
                .as_str()
                .unwrap_or_else(|| panic!("{ctx}: no upgrade in {v}"));
            assert!(u.contains(path), "{ctx}: upgrade {u:?} should name {path}");
        }
        None => assert!(
            v["upgrade"].is_null(),
            "{ctx}: sponsor has no next rung: {v}"
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_burst_then_locked() {
    let w = world(LADDER, "").await;
    let url = w.d.proxy_url("/");
    let anon_policy = policy(&[("burst", 2, 60), ("hourly", 3, 3600)]);
    // Allowed responses carry tier and remaining budget.
    let (parts, _) = get(&url, &[]).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(header(&parts, "x-ratelimit-tier"), "anon");
    assert_eq!(header(&parts, "x-ratelimit-remaining"), "1");
    assert_eq!(header(&parts, "x-ratelimit-limit"), "2");
    assert_eq!(header(&parts, "x-ratelimit-limit-hour"), "3");
    assert_eq!(header(&parts, "ratelimit-policy"), anon_policy);
    // The burst window counts in 5 s slots: a unit taken at T0 (slot-aligned) frees at T0 + 65 s.
    assert_eq!(
        header(&parts, "ratelimit"),
        format!("\"burst\";r=1;t=65, \"hourly\";r=2;t={TO_HOUR}")
    );
    let (parts, _) = get(&url, &[]).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(header(&parts, "x-ratelimit-remaining"), "0");

    let (parts, body) = get(&url, &[]).await;
    assert_429(
        &parts,
        &body,
        &Expect {
            tier: "anon",
            reason: "burst",
            // The lockout (60 s) lasts until the burst's slot leaves the window: 65 s.
            retry: 65,
            hourly_limit: 3,
            limit: 2,
            policy: anon_policy.clone(),
            ratelimit_item: "\"burst\";r=0;t=65".into(),
            upgrade: Some("/login"),
        },
    );
    assert_eq!(
        w.up.state
            .requests
            .load(std::sync::atomic::Ordering::SeqCst),
        2,
        "a 429 never reaches the upstream"
    );

    // The burst earned a strike and a 65 s lockout: 10 s later the caller is locked, with the
    // remaining lockout as Retry-After.
    w.clock.advance_ms(10_000);
    let (parts, body) = get(&url, &[]).await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    let v = json(&body);
    assert_eq!(v["reason"], "locked", "{v}");
    assert_eq!(v["retryAfter"], 55);
    assert_eq!(header(&parts, "retry-after"), "55");
    assert_eq!(header(&parts, "x-ratelimit-tier"), "anon");
    assert_eq!(header(&parts, "x-ratelimit-remaining"), "0");
    assert_eq!(header(&parts, "x-ratelimit-reset"), "55");
    assert!(v["upgrade"].as_str().unwrap().contains("/login"));
    assert!(v["detail"].as_str().unwrap().contains("locked out"));
    // A locked 429 names the hourly budget like every other 429.
    assert!(v["hourlyLimit"].is_u64(), "{v}");
    assert_eq!(
        v["hourlyLimit"].to_string(),
        header(&parts, "x-ratelimit-limit-hour"),
        "{v}"
    );

    // Exactly Retry-After later, the caller is served again.
    w.clock.advance_ms(55_000);
    let (parts, _) = get(&url, &[]).await;
    assert_eq!(parts.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_cookie_hourly() {
    let w = world(LADDER, "").await;
    let url = w.d.proxy_url("/");
    let cookie = [("cookie", "theme=dark; session=anything")];
    for left in [2, 1, 0] {
        let (parts, _) = get(&url, &cookie).await;
        assert_eq!(parts.status, StatusCode::OK);
        assert_eq!(header(&parts, "x-ratelimit-tier"), "session");
        // Binding window: the fewest units left (hourly 3 < burst 10).
        assert_eq!(header(&parts, "x-ratelimit-remaining"), left.to_string());
        assert_eq!(header(&parts, "x-ratelimit-limit"), "3");
        assert_eq!(header(&parts, "x-ratelimit-reset"), TO_HOUR.to_string());
    }
    let (parts, body) = get(&url, &cookie).await;
    assert_429(
        &parts,
        &body,
        &Expect {
            tier: "session",
            reason: "hourly",
            retry: TO_HOUR,
            hourly_limit: 3,
            limit: 3,
            policy: policy(&[("burst", 10, 60), ("hourly", 3, 3600)]),
            ratelimit_item: format!("\"hourly\";r=0;t={TO_HOUR}"),
            upgrade: Some("/account"),
        },
    );
    // The same caller (a session is metered per IP: 127.0.0.1 here) through /v1/auth.
    let (parts, body) = get(
        &w.d.api_url("/v1/auth"),
        &[
            ("x-original-uri", "/"),
            ("x-real-ip", "127.0.0.1"),
            cookie[0],
        ],
    )
    .await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(json(&body)["reason"], "hourly");
    assert_eq!(header(&parts, "retry-after"), TO_HOUR.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_holder_daily_reject() {
    let w = world(LADDER, "").await;
    let url = w.d.proxy_url("/daily/report");
    let bearer = format!("Bearer {}", jwt("alice"));
    let auth = [("authorization", bearer.as_str())];
    let daily_policy = policy(&[("burst", 10, 60), ("hourly", 3, 3600), ("daily", 2, 86400)]);
    for left in [1, 0] {
        let (parts, _) = get(&url, &auth).await;
        assert_eq!(parts.status, StatusCode::OK);
        assert_eq!(header(&parts, "x-ratelimit-tier"), "session");
        assert_eq!(header(&parts, "ratelimit-policy"), daily_policy);
        assert_eq!(header(&parts, "x-ratelimit-remaining"), left.to_string());
    }
    let (parts, body) = get(&url, &auth).await;
    assert_429(
        &parts,
        &body,
        &Expect {
            tier: "session",
            reason: "daily",
            retry: TO_DAY,
            hourly_limit: 3,
            limit: 2,
            policy: daily_policy,
            ratelimit_item: format!("\"daily\";r=0;t={TO_DAY}"),
            upgrade: Some("/account"),
        },
    );
    // Another token holder is counted apart.
    let other = format!("Bearer {}", jwt("bob"));
    let (parts, _) = get(&url, &[("authorization", other.as_str())]).await;
    assert_eq!(parts.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_key_hourly() {
    let w = world(LADDER, "").await;
    let issued = w
        .engine
        .keys()
        .issue(IssueKey {
            hourly_limit: Some(2),
            tier: None,
            owner: Some("http test".into()),
            note: None,
        })
        .unwrap();
    let url = w.d.proxy_url("/api/feeds");
    let key = [("x-api-key", issued.token.as_str())];
    // Not verified yet: metered one rung down while the lookup lands.
    let (parts, _) = get(&w.d.proxy_url("/"), &key).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(header(&parts, "x-ratelimit-tier"), "session");
    w.engine.keys().process_pending();
    let key_policy = policy(&[
        ("burst", 50, 60),
        ("hourly", 100, 3600),
        ("key_hourly", 2, 3600),
    ]);
    for left in [1, 0] {
        let (parts, _) = get(&url, &key).await;
        assert_eq!(parts.status, StatusCode::OK);
        assert_eq!(header(&parts, "x-ratelimit-tier"), "sponsor");
        assert_eq!(
            header(&parts, "x-ratelimit-limit-hour"),
            "2",
            "the tighter of key limit and tier budget"
        );
        assert_eq!(header(&parts, "ratelimit-policy"), key_policy);
        assert_eq!(header(&parts, "x-ratelimit-remaining"), left.to_string());
    }
    let (parts, body) = get(&url, &key).await;
    assert_429(
        &parts,
        &body,
        &Expect {
            tier: "sponsor",
            reason: "key_hourly",
            retry: TO_HOUR,
            hourly_limit: 2,
            limit: 2,
            policy: key_policy,
            ratelimit_item: format!("\"key_hourly\";r=0;t={TO_HOUR}"),
            upgrade: None,
        },
    );
    // Off the key-limited routes the key is metered by its tier only.
    let (parts, _) = get(&w.d.proxy_url("/other"), &key).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(header(&parts, "x-ratelimit-limit-hour"), "100");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invented_key_is_metered_down_never_up() {
    let w = world(LADDER, "").await;
    let url = w.d.proxy_url("/");
    let invented = [("x-api-key", "rsa_0badc0de_abcdefghijklmnopqrstuvwxyz")];
    let (parts, _) = get(&url, &invented).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(
        header(&parts, "x-ratelimit-tier"),
        "session",
        "pending: one rung below sponsor"
    );
    w.engine.keys().process_pending();
    // Known now to be invalid: metered as what the caller is without it (anonymous).
    let (parts, _) = get(&url, &invented).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(header(&parts, "x-ratelimit-tier"), "anon");
    let (parts, body) = get(&url, &invented).await;
    assert_429(
        &parts,
        &body,
        &Expect {
            tier: "anon",
            reason: "burst",
            retry: 65,
            hourly_limit: 3,
            limit: 2,
            policy: policy(&[("burst", 2, 60), ("hourly", 3, 3600)]),
            ratelimit_item: "\"burst\";r=0;t=65".into(),
            upgrade: Some("/login"),
        },
    );
    // A wrong-shaped key is never looked up and buys nothing either.
    let w2 = world(LADDER, "").await;
    let (parts, _) = get(&w2.d.proxy_url("/"), &[("x-api-key", "not-a-key")]).await;
    assert_eq!(header(&parts, "x-ratelimit-tier"), "anon");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decision_api_and_auth_render_engine_decisions() {
    let w = world(LADDER, "").await;
    let decide = w.d.api_url("/v1/decide");
    let ask = |ip: &str| {
        format!(r#"{{"ip":"{ip}","method":"GET","path":"/","headers":{{"cookie":"session=1"}}}}"#)
    };
    for _ in 0..3 {
        let (parts, body) = send(
            http::Request::post(&decide)
                .header("content-type", "application/json")
                .body(http_support::body(ask("192.0.2.50")))
                .unwrap(),
        )
        .await;
        assert_eq!(parts.status, StatusCode::OK);
        let v = json(&body);
        assert_eq!(v["action"], "allow");
        assert_eq!(v["tier"], "session");
    }
    let (_, body) = send(
        http::Request::post(&decide)
            .header("content-type", "application/json")
            .body(http_support::body(ask("192.0.2.50")))
            .unwrap(),
    )
    .await;
    let v = json(&body);
    assert_eq!(v["action"], "reject");
    assert_eq!(v["reason"], "hourly");
    assert_eq!(v["retryAfter"], TO_HOUR);
    assert_eq!(v["delayMs"], 0);
    assert_eq!(v["headers"]["retry-after"], TO_HOUR.to_string());
    assert_eq!(v["problem"]["hourlyLimit"], 3);
    // The described IP is the identity: another IP with the same cookie is counted apart.
    let (_, body) = send(
        http::Request::post(&decide)
            .header("content-type", "application/json")
            .body(http_support::body(ask("192.0.2.51")))
            .unwrap(),
    )
    .await;
    assert_eq!(json(&body)["action"], "allow");

    // /v1/auth: X-Real-IP from the (trusted, loopback) peer is the client.
    let auth = w.d.api_url("/v1/auth");
    for _ in 0..2 {
        let (parts, _) = get(
            &auth,
            &[("x-original-uri", "/x?y=1"), ("x-real-ip", "203.0.113.80")],
        )
        .await;
        assert_eq!(parts.status, StatusCode::NO_CONTENT);
        assert_eq!(header(&parts, "x-ratelimit-tier"), "anon");
    }
    let (parts, body) = get(
        &auth,
        &[("x-original-uri", "/x"), ("x-real-ip", "203.0.113.80")],
    )
    .await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(json(&body)["reason"], "burst");
    let (parts, _) = get(
        &auth,
        &[("x-original-uri", "/x"), ("x-real-ip", "203.0.113.81")],
    )
    .await;
    assert_eq!(parts.status, StatusCode::NO_CONTENT);
}

const DELAY: &str = r#"
[tiers.anon]
burst = 1000
hourly = 1000
[quota]
anon = 2
soft_window = 1
soft_delay_ms = 40
hard_delay_ms = 150
warn_threshold = 1
[[routes]]
prefix = "/scan"
over_quota = "delay"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_mode_soft_hard_and_reminder() {
    let w = world(DELAY, "").await;
    let url = w.d.proxy_url("/scan/range");
    // n = 1: one unit left (at the warn threshold): reminder, no delay.
    let (parts, _) = get(&url, &[]).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(header(&parts, "x-quota-warning"), "1 units left today");
    let (parts, _) = get(&url, &[]).await;
    assert_eq!(header(&parts, "x-quota-warning"), "0 units left today");
    // n = 3: a soft hit, held ~40 ms, then served (never a 429).
    let t0 = Instant::now();
    let (parts, body) = get(&url, &[]).await;
    let soft = t0.elapsed();
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(body, "ok");
    assert!(
        soft >= Duration::from_millis(40),
        "soft hit held only {soft:?}"
    );
    assert_eq!(header(&parts, "x-quota-warning"), "0 units left today");
    // n = 4: past the soft window, a hard hit, held ~150 ms.
    let t0 = Instant::now();
    let (parts, _) = get(&url, &[]).await;
    let hard = t0.elapsed();
    assert_eq!(parts.status, StatusCode::OK);
    assert!(
        hard >= Duration::from_millis(150),
        "hard hit held only {hard:?}"
    );
    assert_eq!(w.d.gate.admitted(), 2);
    assert_eq!(
        w.up.state
            .requests
            .load(std::sync::atomic::Ordering::SeqCst),
        4
    );
    // The decision API reports the delay instead of holding it.
    let (_, body) = send(
        http::Request::post(w.d.api_url("/v1/decide"))
            .header("content-type", "application/json")
            .body(http_support::body(r#"{"ip":"127.0.0.1","path":"/scan/x"}"#))
            .unwrap(),
    )
    .await;
    let v = json(&body);
    assert_eq!(v["action"], "delay");
    assert_eq!(v["delayMs"], 150);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_mode_held_bound_gives_503_while_others_are_served() {
    let config = DELAY
        .replace("hard_delay_ms = 150", "hard_delay_ms = 3600000")
        .replace("soft_delay_ms = 40", "soft_delay_ms = 3600000")
        // The session rung shares the address's daily count at L_anon unless raised.
        + "[tiers.session]\ndaily = 10000\n";
    let w = world(&config, "max_held_per_identity = 2\n").await;
    let url = w.d.proxy_url("/scan/range");
    for _ in 0..2 {
        let (parts, _) = get(&url, &[]).await;
        assert_eq!(parts.status, StatusCode::OK);
    }
    // Over quota: each request is held for an hour; two are allowed at once for this caller.
    let held: Vec<_> = (0..2)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { get(&url, &[]).await })
        })
        .collect();
    wait_until("two held requests", || w.d.gate.held() == 2).await;
    let (parts, body) = get(&url, &[]).await;
    assert_eq!(parts.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&parts, "retry-after"), "3600");
    assert_eq!(header(&parts, "x-ratelimit-tier"), "anon");
    assert_eq!(json(&body)["retryAfter"], 3600);
    assert_eq!(w.d.gate.refused(), 1);
    // Another caller (a session cookie is a different identity) is served meanwhile.
    let (parts, _) = get(&w.d.proxy_url("/"), &[("cookie", "session=1")]).await;
    assert_eq!(parts.status, StatusCode::OK);
    for h in held {
        h.abort();
    }
}

const BEHIND_A_PROXY: &str = r#"
[tiers.anon]
burst = 2
hourly = 1000
[lockout]
base = "60s"
[identity]
trusted_proxies = ["127.0.0.1"]
"#;

/// The probe's P1 on every surface: a trusted proxy's field that names no usable client makes
/// an unattributed caller of that proxy, refused past its burst but never struck, so the proxy
/// (127.0.0.1 here) is never locked; named clients are struck as before; a trusted proxy and
/// an allow-listed address are never locked by strikes (the latter through its IPv6 group),
/// and an operator may not lock a trusted proxy. The proxy's two paths (own loop, hyper),
/// `/v1/auth` (junk `X-Real-IP` from the trusted peer) and `/v1/decide` (the proxy named).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_naming_no_client_never_locks_the_trusted_proxy() {
    use limiter_daemon::engine::error::EngineError;
    use limiter_daemon::engine::lockouts::LockTarget;
    use limiter_daemon::model::{ListEntry, ListKind};
    for http_extra in ["", "max_header_count = 128\n"] {
        let w = world(BEHIND_A_PROXY, http_extra).await;
        let locked = || -> Vec<String> {
            w.engine
                .lockouts()
                .list()
                .unwrap()
                .iter()
                .map(|l| l.ip.to_string())
                .collect()
        };
        let proxy = w.d.proxy_url("/page");
        let mut statuses = Vec::new();
        for junk in ["not-an-ip", "unknown", "", "_hidden"] {
            let (parts, body) = get(&proxy, &[("x-forwarded-for", junk)]).await;
            if parts.status == StatusCode::TOO_MANY_REQUESTS {
                let v = json(&body);
                assert_eq!(v["reason"], "burst", "{http_extra:?}");
                let detail = v["detail"].as_str().unwrap();
                assert!(detail.contains("could not name"), "{detail}");
            }
            statuses.push(parts.status.as_u16());
        }
        assert_eq!(statuses, [200, 200, 429, 429], "{http_extra:?}");
        assert_eq!(
            locked(),
            Vec::<String>::new(),
            "{http_extra:?}: nothing locked"
        );
        for named in [&[("x-forwarded-for", "198.51.100.20")][..], &[]] {
            let (parts, _) = get(&proxy, named).await;
            assert_eq!(parts.status, StatusCode::OK, "{http_extra:?} {named:?}");
        }

        // /v1/auth: the trusted peer's junk X-Real-IP, the same kind of caller.
        // The burst window frees its slots 60-65 s after use.
        w.clock.advance_ms(66_000);
        let auth = w.d.api_url("/v1/auth");
        let mut statuses = Vec::new();
        for junk in ["not-an-ip", "unknown", "", "not-an-ip"] {
            let (parts, _) = get(&auth, &[("x-original-uri", "/x"), ("x-real-ip", junk)]).await;
            statuses.push(parts.status.as_u16());
        }
        assert_eq!(statuses, [204, 204, 429, 429], "{http_extra:?}");
        assert_eq!(locked(), Vec::<String>::new(), "{http_extra:?}");
        let (parts, _) = get(
            &auth,
            &[("x-original-uri", "/x"), ("x-real-ip", "203.0.113.80")],
        )
        .await;
        assert_eq!(parts.status, StatusCode::NO_CONTENT, "{http_extra:?}");

        // /v1/decide naming the proxy: refused past the burst, never locked. A client in the
        // IPv6 group of an allow-listed address likewise; a plain client is locked.
        w.engine
            .lists()
            .add(
                ListKind::Allow,
                ListEntry {
                    net: "2001:db8:7::1/128".parse().unwrap(),
                    until_ms: None,
                    comment: "monitoring".into(),
                },
            )
            .unwrap();
        let decide = w.d.api_url("/v1/decide");
        let ask = |ip: &str| {
            let body = format!(r#"{{"ip":"{ip}","method":"GET","path":"/","headers":{{}}}}"#);
            http::Request::post(&decide)
                .header("content-type", "application/json")
                .body(http_support::body(body))
                .unwrap()
        };
        for ip in ["127.0.0.1", "2001:db8:7::2", "192.0.2.50"] {
            let mut actions = Vec::new();
            for _ in 0..4 {
                let (parts, body) = send(ask(ip)).await;
                assert_eq!(parts.status, StatusCode::OK);
                let v = json(&body);
                actions.push(format!("{}/{}", v["action"], v["reason"]));
            }
            assert_eq!(
                &actions[..3],
                ["\"allow\"/null", "\"allow\"/null", "\"reject\"/\"burst\""],
                "{http_extra:?} {ip}"
            );
        }
        assert_eq!(locked(), ["192.0.2.50"], "{http_extra:?}");

        // An operator may not lock a trusted proxy, alone or inside a range.
        for target in [
            LockTarget::Addr("127.0.0.1".parse().unwrap()),
            LockTarget::Net("127.0.0.0/8".parse().unwrap()),
        ] {
            let err = w
                .engine
                .lockouts()
                .lock_target(target, Duration::from_secs(600), "test")
                .unwrap_err();
            assert!(
                matches!(err, EngineError::TrustedProxy { .. }),
                "{target:?}: {err}"
            );
        }
        assert_eq!(locked(), ["192.0.2.50"], "{http_extra:?}");
        w.d.stop().await;
    }
}
