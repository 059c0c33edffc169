//! Debian's Caddy in front of an app with the shipped `examples/caddy/Caddyfile`:
//! `forward_auth` asks the daemon's `/v1/auth` (real engine, in-process) with Caddy's
//! `X-Forwarded-*` fields. Clients on 127.0.0.2 and 127.0.0.3 are metered apart, the burst's 429
//! reaches the client as the daemon wrote it, a route rule applies by `X-Forwarded-Uri`, an
//! allowed response carries the copied rate-limit fields, and a client cannot name itself
//! someone else through the fields Caddy passes on.

use crate::http_support;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use crate::rig::{ip, request, world, world_with};
use http_support::start_upstream;
use limiter_tests::caddy::{available, forward_auth_example, with_token, Caddy};
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

/// What the app behind Caddy saw that it never should: a forward-auth request (`/v1/auth`),
/// the daemon's API token, or a Caddy placeholder left unresolved (`{http.…}`).
#[derive(Default)]
struct Seen {
    requests: std::sync::atomic::AtomicUsize,
    wrong: std::sync::Mutex<Vec<String>>,
}

/// An app on 127.0.0.1:0 that answers `ok` and records into `seen` any request it should
/// never have been sent.
async fn recording_app(token: &'static str) -> (SocketAddr, std::sync::Arc<Seen>) {
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = std::sync::Arc::new(Seen::default());
    let st = std::sync::Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let st = std::sync::Arc::clone(&st);
            let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                st.requests.fetch_add(1, Ordering::Relaxed);
                let bad = req.uri().path().starts_with("/v1/auth")
                    || req.headers().values().any(|v| {
                        let v = String::from_utf8_lossy(v.as_bytes());
                        v.contains(token) || v.contains("{http.")
                    });
                if bad {
                    let line = format!("{} {} {:?}", req.method(), req.uri(), req.headers());
                    st.wrong.lock().unwrap().push(line);
                }
                async { Ok::<_, std::convert::Infallible>(http::Response::new("ok".to_string())) }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

/// `rounds` requests for `/free/x` on one keep-alive connection to `to`; the statuses other
/// than 200.
async fn keep_alive_load(to: SocketAddr, rounds: usize) -> Vec<String> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let mut s = BufReader::new(tokio::net::TcpStream::connect(to).await.unwrap());
    let mut odd = Vec::new();
    for _ in 0..rounds {
        s.get_mut()
            .write_all(b"GET /free/x HTTP/1.1\r\nhost: app.test\r\n\r\n")
            .await
            .unwrap();
        let (mut line, mut len) = (String::new(), 0usize);
        s.read_line(&mut line).await.unwrap();
        let status = line.split_whitespace().nth(1).unwrap_or("").to_string();
        loop {
            let mut h = String::new();
            s.read_line(&mut h).await.unwrap();
            if h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0; len];
        s.read_exact(&mut body).await.unwrap();
        if status != "200" {
            odd.push(format!("{status} {}", String::from_utf8_lossy(&body)));
        }
    }
    odd
}

/// The shipped Caddyfile with the API token, under bursts of keep-alive load while the daemon
/// closes idle connections quickly: the app never receives a forward-auth request, the token
/// or a literal `{http.…}` placeholder (Caddy 2.6 copies one for every field the daemon's 204
/// leaves out), the client sees no placeholder either, and every answer is a 200 (no limit is
/// near: `/free` is unmetered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_the_app_never_sees_the_auth_call_its_token_or_a_placeholder() {
    if !limiter_tests::require(available(), "caddy (/usr/bin/caddy)") {
        return;
    }
    const TOKEN: &str = "caddy-test-token-0123456789abcdef";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("api-token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let (app, seen) = recording_app(TOKEN).await;
    // Idle connections to the daemon are closed between bursts, so Caddy dials anew in each.
    let extra = format!(
        "api_token_file = {:?}\nheader_read_timeout = \"100ms\"\n",
        file.display().to_string()
    );
    // One address sends all the load: its network's burst must not lock it out.
    let w = world_with("[networks.prefix]\nenabled = false\n", None, &extra).await;
    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = with_token(&forward_auth_example(listen, app, w.d.api), TOKEN);
    let caddy = tokio::task::spawn_blocking(move || Caddy::start(&conf, listen))
        .await
        .unwrap();

    // A metered and an unmetered request: every field the daemon sent reaches the client,
    // none it left out arrives as a placeholder.
    for path in ["/page", "/free/y"] {
        let r = request(ip("127.0.0.2"), listen, "GET", path, &[]).await;
        assert_eq!(r.status, 200, "{path}: {}\n{}", r.body, caddy.log());
        assert_eq!(r.header("x-ratelimit-tier"), Some("anon"), "{path}");
        for (k, v) in &r.headers {
            assert!(!v.contains("{http."), "{path}: {k}: {v}");
        }
    }
    assert_eq!(
        request(ip("127.0.0.2"), listen, "GET", "/page", &[])
            .await
            .header("x-ratelimit-remaining"),
        Some("1")
    );

    let mut odd = Vec::new();
    for _ in 0..8 {
        let load: Vec<_> = (0..48)
            .map(|_| tokio::spawn(keep_alive_load(listen, 40)))
            .collect();
        for l in load {
            odd.extend(l.await.unwrap());
        }
        // Longer than `header_read_timeout`: the daemon closes Caddy's idle connections.
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let wrong = seen.wrong.lock().unwrap().clone();
    assert!(
        wrong.is_empty(),
        "{} of {} requests the app saw should never have reached it, e.g. {}",
        wrong.len(),
        seen.requests.load(Ordering::Relaxed),
        wrong[0]
    );
    assert!(
        odd.is_empty(),
        "{} not 200, e.g. {:?}",
        odd.len(),
        odd.first()
    );
    assert!(seen.requests.load(Ordering::Relaxed) >= 8 * 48 * 40);
    drop(caddy);
}
