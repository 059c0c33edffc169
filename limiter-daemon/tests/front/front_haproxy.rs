//! Debian's HAProxy from the shipped `examples/haproxy/haproxy.cfg`, in HTTP mode with `option
//! forwardfor` and in TCP mode with `send-proxy-v2`, in front of the daemon's built-in proxy
//! (real engine, in-process; `proxy_protocol = "optional"`) with HAProxy in `[identity]
//! trusted_proxies`: clients on 127.0.0.2 and 127.0.0.3 are metered apart both ways, the
//! burst's 429 reaches the client as the daemon wrote it, a client's own X-Forwarded-For names
//! no one else, and a PROXY header from a peer that is no trusted proxy is refused.

use crate::http_support;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use crate::rig::{ip, request, world_with};
use http_support::start_upstream;
use limiter_tests::free_port;
use limiter_tests::haproxy::{available, example, Haproxy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_forwardfor_meters_each_client_and_passes_the_429() {
    if !limiter_tests::require(available(), "haproxy (/usr/sbin/haproxy)") {
        return;
    }
    let up = start_upstream().await;
    let w = world_with(
        "[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
        Some(up.addr),
        "proxy_protocol = \"optional\"\n",
    )
    .await;
    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let tcp = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let proxy = w.d.proxy.unwrap();
    let conf = example(listen, tcp, proxy, up.addr);
    let haproxy = tokio::task::spawn_blocking(move || Haproxy::start(&conf, listen))
        .await
        .unwrap();
    let (a, b) = (ip("127.0.0.2"), ip("127.0.0.3"));

    for left in ["2", "1", "0"] {
        let r = request(a, listen, "GET", "/page", &[]).await;
        assert_eq!(r.status, 200, "{}\n{}", r.body, haproxy.log());
        assert_eq!(r.body, "ok");
        assert_eq!(r.field("x-ratelimit-remaining"), left);
    }
    let r = request(a, listen, "GET", "/page", &[]).await;
    assert_eq!(r.status, 429, "{}\n{}", r.body, haproxy.log());
    assert_eq!(r.field("content-type"), "application/problem+json");
    assert!(r.field("retry-after").parse::<u64>().unwrap() > 0);
    assert!(r.header("ratelimit-policy").is_some());
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
    assert_eq!((r.status, r.field("x-ratelimit-remaining")), (200, "2"));
    assert_eq!(up.state.requests.load(Ordering::SeqCst), 4);

    // TCP mode, send-proxy-v2: the header names each client. b has 1 left of its burst, a
    // none; a fresh client (127.0.0.4) its whole burst.
    let r = request(b, tcp, "GET", "/page", &[]).await;
    assert_eq!(
        (r.status, r.field("x-ratelimit-remaining")),
        (200, "1"),
        "{}",
        haproxy.log()
    );
    let r = request(a, tcp, "GET", "/page", &[]).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.field("content-type"), "application/problem+json");
    let r = request(ip("127.0.0.4"), tcp, "GET", "/page", &[]).await;
    assert_eq!((r.status, r.field("x-ratelimit-remaining")), (200, "2"));
    assert_eq!(up.state.requests.load(Ordering::SeqCst), 6);

    // A PROXY header straight from 127.0.0.5, no trusted proxy: refused, the connection
    // closed without an answer; its plain request is served (optional) as itself.
    let v1: &[u8] = b"PROXY TCP4 203.0.113.70 127.0.0.1 5000 80\r\n";
    let v2: &[u8] =
        b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c\xcb\x00\x71\x46\x7f\x00\x00\x01\x13\x88\x00\x50";
    for line in [v1, v2] {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind(SocketAddr::new(ip("127.0.0.5"), 0)).unwrap();
        let mut s = sock.connect(proxy).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut req = line.to_vec();
        req.extend_from_slice(b"GET /page HTTP/1.1\r\nhost: app.test\r\nconnection: close\r\n\r\n");
        s.write_all(&req).await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut out))
            .await
            .expect("closed within 10 s");
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
    }
    let r = request(ip("127.0.0.5"), proxy, "GET", "/page", &[]).await;
    assert_eq!((r.status, r.field("x-ratelimit-remaining")), (200, "2"));
    assert_eq!(up.state.requests.load(Ordering::SeqCst), 7);
    drop(haproxy);
}

/// The shipped example with the daemon down: as shipped HAProxy fails open (the app, its
/// backup server, serves the request unmetered, on both frontends); without the `backup` lines
/// it fails closed (HAProxy's 503, and the app sees nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_daemon_down_haproxy_fails_open_or_closed_as_chosen() {
    if !limiter_tests::require(available(), "haproxy (/usr/sbin/haproxy)") {
        return;
    }
    let up = start_upstream().await;
    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let tcp = SocketAddr::from(([127, 0, 0, 1], free_port()));
    // Nothing listens on the daemon's address: it is stopped.
    let daemon = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = example(listen, tcp, daemon, up.addr);
    let open = {
        let conf = conf.clone();
        tokio::task::spawn_blocking(move || Haproxy::start(&conf, listen))
            .await
            .unwrap()
    };
    for front in [listen, tcp] {
        let r = request(ip("127.0.0.2"), front, "GET", "/page", &[]).await;
        assert_eq!(r.status, 200, "{}\n{}", r.body, open.log());
        assert_eq!(r.body, "ok");
    }
    assert_eq!(up.state.requests.load(Ordering::SeqCst), 2);
    drop(open);

    let closed: String = conf
        .lines()
        .filter(|l| !l.trim_start().starts_with("server app "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(closed, conf, "the example has backup lines to delete");
    let closed = tokio::task::spawn_blocking(move || Haproxy::start(&closed, listen))
        .await
        .unwrap();
    let r = request(ip("127.0.0.2"), listen, "GET", "/page", &[]).await;
    assert_eq!(r.status, 503, "{}\n{}", r.body, closed.log());
    assert_eq!(
        up.state.requests.load(Ordering::SeqCst),
        2,
        "failing closed, nothing reaches the app"
    );
}
