//! Debian's HAProxy in HTTP mode with `option forwardfor`, from the shipped
//! `examples/haproxy/haproxy.cfg`, in front of the daemon's built-in proxy (real engine,
//! in-process) with HAProxy in `[identity] trusted_proxies`: clients on 127.0.0.2 and 127.0.0.3
//! are metered apart, the burst's 429 reaches the client as the daemon wrote it, and a client's
//! own X-Forwarded-For names no one else.

mod front_support;
mod http_support;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use front_support::{ip, request, world_with};
use http_support::start_upstream;
use limiter_tests::haproxy::{available, forwardfor_example, Haproxy};
use limiter_tests::nginx::free_port;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_forwardfor_meters_each_client_and_passes_the_429() {
    if !limiter_tests::require(available(), "haproxy (/usr/sbin/haproxy)") {
        return;
    }
    let up = start_upstream().await;
    let w = world_with(
        "[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
        Some(up.addr),
        "",
    )
    .await;
    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = forwardfor_example(listen, w.d.proxy.unwrap());
    let haproxy = tokio::task::spawn_blocking(move || Haproxy::start(&conf, listen))
        .await
        .unwrap();
    let (a, b) = (ip("127.0.0.2"), ip("127.0.0.3"));

    for left in ["2", "1", "0"] {
        let r = request(a, listen, "GET", "/page", &[]).await;
        assert_eq!(r.status, 200, "{}\n{}", r.body, haproxy.log());
        assert_eq!(r.body, "ok");
        assert_eq!(r.header("x-ratelimit-remaining"), left);
    }
    let r = request(a, listen, "GET", "/page", &[]).await;
    assert_eq!(r.status, 429, "{}\n{}", r.body, haproxy.log());
    assert_eq!(r.header("content-type"), "application/problem+json");
    assert!(r.header("retry-after").parse::<u64>().unwrap() > 0);
    assert!(r.get("ratelimit-policy").is_some());
    assert_eq!(r.json()["reason"], "burst");
    assert_eq!(up.state.requests.load(Ordering::SeqCst), 3);

    // A's own X-Forwarded-For comes before HAProxy's line: still a.
    let r = request(
        a,
        listen,
        "GET",
        "/page",
        &[("x-forwarded-for", "203.0.113.60")],
    )
    .await;
    assert_eq!(r.status, 429, "{}", r.body);

    // B is metered apart.
    let r = request(b, listen, "GET", "/page", &[]).await;
    assert_eq!((r.status, r.header("x-ratelimit-remaining")), (200, "2"));
    assert_eq!(up.state.requests.load(Ordering::SeqCst), 4);
    drop(haproxy);
}
