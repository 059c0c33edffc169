//! Debian's Caddy in front of an app with the shipped `examples/caddy/Caddyfile`:
//! `forward_auth` asks the daemon's `/v1/auth` (real engine, in-process) with Caddy's
//! `X-Forwarded-*` fields. Clients on 127.0.0.2 and 127.0.0.3 are metered apart, the burst's 429
//! reaches the client as the daemon wrote it, a route rule applies by `X-Forwarded-Uri`, an
//! allowed response carries the copied rate-limit fields, and a client cannot name itself
//! someone else through the fields Caddy passes on.

use crate::http_support;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use crate::rig::{ip, request, world};
use http_support::start_upstream;
use limiter_tests::caddy::{available, forward_auth_example, Caddy};
use limiter_tests::free_port;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caddy_forward_auth_meters_each_client_and_hands_over_the_429() {
    if !limiter_tests::require(available(), "caddy (/usr/bin/caddy)") {
        return;
    }
    let up = start_upstream().await;
    let w = world("").await;
    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = forward_auth_example(listen, up.addr, w.d.api);
    let caddy = tokio::task::spawn_blocking(move || Caddy::start(&conf, listen))
        .await
        .unwrap();
    let (a, b) = (ip("127.0.0.2"), ip("127.0.0.3"));

    // Client a: two of its burst of 3, each allowed answer carrying the copied fields.
    for left in ["2", "1"] {
        let r = request(a, listen, "GET", "/page?x=1", &[]).await;
        assert_eq!(r.status, 200, "{}\n{}", r.body, caddy.log());
        assert_eq!(r.body, "ok");
        assert_eq!(r.field("x-ratelimit-remaining"), left);
        assert_eq!(r.field("x-ratelimit-tier"), "anon");
        assert!(r.field("ratelimit-policy").contains("\"burst\";q=3;w=60"));
    }
    // The route rule applies by X-Forwarded-Uri: `/free` is never metered (any method), so
    // these leave a's burst where it was.
    for method in ["GET", "POST"] {
        let r = request(
            a,
            listen,
            method,
            "/free/item?y=2",
            &[("content-length", "0")],
        )
        .await;
        assert_eq!(r.status, 200, "{method}: {}", r.body);
    }
    let r = request(a, listen, "GET", "/page", &[]).await;
    assert_eq!((r.status, r.field("x-ratelimit-remaining")), (200, "0"));
    assert_eq!(up.state.requests.load(Ordering::SeqCst), 5);

    // Over the burst: the daemon's 429 reaches the client; the app is not asked.
    let r = request(a, listen, "GET", "/page", &[]).await;
    assert_eq!(r.status, 429, "{}\n{}", r.body, caddy.log());
    assert_eq!(r.field("content-type"), "application/problem+json");
    assert!(r.field("retry-after").parse::<u64>().unwrap() > 0);
    assert_eq!(r.field("x-ratelimit-remaining"), "0");
    assert!(r.header("ratelimit-policy").is_some());
    let v = r.json();
    assert_eq!(v["status"], 429);
    assert_eq!(v["reason"], "burst");
    assert_eq!(up.state.requests.load(Ordering::SeqCst), 5);

    // Naming someone else through the fields Caddy passes on changes nothing: Caddy replaces
    // X-Forwarded-For, the daemon ignores X-Real-IP from Caddy, and the Caddyfile strips
    // nginx's X-Original-URI (which would otherwise be refused as ambiguous, 400).
    let r = request(
        a,
        listen,
        "GET",
        "/page",
        &[
            ("x-forwarded-for", "203.0.113.50"),
            ("x-real-ip", "203.0.113.51"),
            ("x-original-uri", "/free"),
        ],
    )
    .await;
    assert_eq!(r.status, 429, "{}", r.body);

    // Client b is metered apart.
    let r = request(b, listen, "GET", "/page", &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.field("x-ratelimit-remaining"), "2");
    assert_eq!(up.state.requests.load(Ordering::SeqCst), 6);
    drop(caddy);
}

/// The shipped Caddyfile with the daemon down: as shipped Caddy fails open (the app serves the
/// request unmetered); with its one documented line in place of `reverse_proxy` in
/// `handle_errors` it fails closed (503, and the app sees nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_daemon_down_caddy_fails_open_or_closed_as_chosen() {
    if !limiter_tests::require(available(), "caddy (/usr/bin/caddy)") {
        return;
    }
    let up = start_upstream().await;
    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    // Nothing listens on the daemon's address: it is stopped.
    let daemon = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = forward_auth_example(listen, up.addr, daemon);
    let open = {
        let conf = conf.clone();
        tokio::task::spawn_blocking(move || Caddy::start(&conf, listen))
            .await
            .unwrap()
    };
    let r = request(ip("127.0.0.2"), listen, "GET", "/page", &[]).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, open.log());
    assert_eq!(r.body, "ok");
    assert_eq!(up.state.requests.load(Ordering::SeqCst), 1);
    drop(open);

    let app = up.addr.to_string();
    let (proxying, responding) = (
        format!("\t\treverse_proxy @limiter_down {app}\n"),
        "\t\t# respond @limiter_down",
    );
    assert!(conf.contains(&proxying) && conf.contains(responding));
    let closed = conf
        .replace(&proxying, "")
        .replace(responding, "\t\trespond @limiter_down");
    let closed = tokio::task::spawn_blocking(move || Caddy::start(&closed, listen))
        .await
        .unwrap();
    let r = request(ip("127.0.0.2"), listen, "GET", "/page", &[]).await;
    assert_eq!(r.status, 503, "{}\n{}", r.body, closed.log());
    assert_eq!(
        up.state.requests.load(Ordering::SeqCst),
        1,
        "failing closed, nothing reaches the app"
    );
}
