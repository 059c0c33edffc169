//! The shipped nginx `auth_request` config (`examples/nginx/limiter-auth.conf`) with a real
//! nginx in front of a real upstream, asking the daemon's `/v1/auth` (in-process here, with a
//! scripted decider; `tests/tests/nginx_auth.rs` runs the daemon binary with its engine).

use crate::http_support;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use http::StatusCode;
use http_support::*;
use limiter_tests::free_port;
use limiter_tests::nginx::{auth_example, auth_example_with_token, available, Nginx};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_auth_request_allows_rejects_and_holds() {
    if !limiter_tests::require(available(), "nginx (/usr/sbin/nginx)") {
        return;
    }
    let up = start_upstream().await;
    let decider = by_header();
    let d = start(settings(None, ""), decider.clone()).await;
    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = auth_example(listen, up.addr, d.api);
    let nginx = tokio::task::spawn_blocking(move || Nginx::start(&conf, listen, 1))
        .await
        .unwrap();
    let url = |p: &str| format!("http://{listen}{p}");

    // Allowed: reaches the upstream, carries the rate-limit headers. A client's own
    // X-Forwarded-Uri (Caddy's field) is dropped by the shipped config, not believed.
    let (parts, body) = get(
        &url("/page?x=1"),
        &[("x-test-who", "reader"), ("x-forwarded-uri", "/other")],
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK, "{}", nginx.error_log());
    assert_eq!(body, "ok");
    assert_eq!(header(&parts, "x-ratelimit-tier"), "anon");
    assert_eq!(header(&parts, "x-ratelimit-remaining"), "100");
    assert_eq!(up.state.requests.load(Ordering::SeqCst), 1);
    {
        let seen = decider.seen.lock();
        assert_eq!(seen[0].path, "/page");
        assert_eq!(
            seen[0].peer,
            "127.0.0.1".parse::<std::net::IpAddr>().unwrap()
        );
    }

    // Rejected: 429 with the daemon's problem document and headers; the upstream is not asked.
    let (parts, body) = get(&url("/page"), &[("x-test-who", "burst")]).await;
    assert_eq!(
        parts.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        nginx.error_log()
    );
    assert_eq!(header(&parts, "content-type"), "application/problem+json");
    assert_eq!(header(&parts, "retry-after"), "42");
    assert_eq!(header(&parts, "x-ratelimit-remaining"), "0");
    assert_eq!(
        header(&parts, "ratelimit-policy"),
        "\"burst\";q=120;w=60, \"hourly\";q=600;w=3600, \"daily\";q=1000;w=86400"
    );
    let v = json(&body);
    assert_eq!(v["status"], 429);
    assert_eq!(v["reason"], "burst");
    assert_eq!(v["retryAfter"], 42);
    assert!(v["upgrade"].as_str().unwrap().contains("/login"));
    assert_eq!(up.state.requests.load(Ordering::SeqCst), 1);

    // Delayed: held by the daemon, then served.
    let t0 = Instant::now();
    let (parts, _) = get(
        &url("/page"),
        &[("x-test-who", "scanner"), ("x-test-delay-ms", "100")],
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
    assert!(t0.elapsed() >= Duration::from_millis(100));
    assert_eq!(header(&parts, "x-quota-warning"), "0 units left today");
    assert_eq!(up.state.requests.load(Ordering::SeqCst), 2);
    drop(nginx);
}

/// With `[http] api_token_file` set, the shipped config's `proxy_set_header Authorization`
/// carries the token: nginx with the right one is served, with a wrong one every request is
/// refused 401 and never reaches the app. The caller's own `Authorization` (its JWT) still
/// reaches the decision, through `X-Original-Authorization`, and the daemon's token does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_passes_the_api_token() {
    if !limiter_tests::require(available(), "nginx (/usr/sbin/nginx)") {
        return;
    }
    const TOKEN: &str = "nginx-test-token-0123456789abcdef";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("api-token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let up = start_upstream().await;
    let decider = by_header();
    let d = start(
        settings(
            None,
            &format!("api_token_file = {:?}\n", file.display().to_string()),
        ),
        decider.clone(),
    )
    .await;
    for (token, status) in [
        (TOKEN, StatusCode::OK),
        ("wrong-token-0123456789abcdef", StatusCode::UNAUTHORIZED),
    ] {
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let conf = auth_example_with_token(listen, up.addr, d.api, token);
        let nginx = tokio::task::spawn_blocking(move || Nginx::start(&conf, listen, 1))
            .await
            .unwrap();
        let (parts, _) = get(
            &format!("http://{listen}/page"),
            &[("authorization", "Bearer callers-own-jwt")],
        )
        .await;
        assert_eq!(parts.status, status, "{}", nginx.error_log());
        drop(nginx);
    }
    // Only the request with the right token was decided and forwarded.
    assert_eq!(up.state.requests.load(Ordering::SeqCst), 1);
    let seen = decider.seen.lock();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].headers["authorization"], "Bearer callers-own-jwt");
    assert!(!seen[0].headers.contains_key("x-original-authorization"));
}
