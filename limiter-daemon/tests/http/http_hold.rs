//! Scan delays held on async timers, with bounds: the mechanics with a scripted decider (the
//! engine-driven delay mode is in `http_engine.rs`). Delays are scaled down (tens of ms) or, when
//! a test needs a request to stay held, long and never waited for.

use crate::http_support;

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use http::{Request, StatusCode};
use http_support::*;
use limiter_daemon::edge::render::response::Hints;
use limiter_daemon::edge::steps::hold::HoldGate;
use limiter_daemon::edge::steps::Steps;
use limiter_daemon::model::{DelayKind, Tier};
use limiter_daemon::surfaces::api::router::router;
use limiter_daemon::surfaces::api::state::ApiState;
use std::net::SocketAddr;
use std::sync::Arc;
use tower::ServiceExt;

#[tokio::test]
async fn delayed_request_is_held_then_forwarded_with_reminder() {
    let up = start_upstream().await;
    let d = start(settings(Some(up.addr), ""), by_header()).await;
    let t0 = Instant::now();
    let (parts, body) = get(
        &d.proxy_url("/"),
        &[("x-test-who", "scanner"), ("x-test-delay-ms", "120")],
    )
    .await;
    let took = t0.elapsed();
    assert_eq!(parts.status, StatusCode::OK, "a delay is never a 429");
    assert_eq!(body, "ok");
    assert!(took >= Duration::from_millis(120), "held only {took:?}");
    assert_eq!(header(&parts, "x-quota-warning"), "0 units left today");
    assert_eq!(header(&parts, "x-ratelimit-tier"), "anon");
    assert_eq!(d.gate.held(), 0);
    assert_eq!(d.gate.admitted(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_bound_per_identity_gives_503_and_others_are_served() {
    let up = start_upstream().await;
    let d = start(
        settings(Some(up.addr), "max_held = 10\nmax_held_per_identity = 2\n"),
        by_header(),
    )
    .await;
    let url = d.proxy_url("/");
    // Two requests held for an hour each: they stay held for the rest of the test.
    let held: Vec<_> = (0..2)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                get(
                    &url,
                    &[("x-test-who", "scanner"), ("x-test-delay-ms", "3600000")],
                )
                .await
            })
        })
        .collect();
    wait_until("two held requests", || d.gate.held() == 2).await;

    let (parts, body) = get(
        &url,
        &[("x-test-who", "scanner"), ("x-test-delay-ms", "3600000")],
    )
    .await;
    assert_eq!(parts.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&parts, "retry-after"), "3600");
    assert_eq!(header(&parts, "content-type"), "application/problem+json");
    let v = json(&body);
    assert_eq!(v["status"], 503);
    assert_eq!(v["retryAfter"], 3600);
    assert_eq!(d.gate.refused(), 1);

    // Another caller is served at once while the scanner's requests are held.
    let t0 = Instant::now();
    let (parts, _) = get(&url, &[("x-test-who", "reader")]).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert!(t0.elapsed() < Duration::from_secs(5));
    // Another delayed identity still has its own slots.
    let other = tokio::spawn({
        let url = url.clone();
        async move {
            get(
                &url,
                &[("x-test-who", "scanner-2"), ("x-test-delay-ms", "3600000")],
            )
            .await
        }
    });
    wait_until("third held request", || d.gate.held() == 3).await;
    assert_eq!(d.gate.refused(), 1);
    for h in held {
        h.abort();
    }
    other.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_bound_in_total_gives_503() {
    let up = start_upstream().await;
    let d = start(
        settings(Some(up.addr), "max_held = 2\nmax_held_per_identity = 2\n"),
        by_header(),
    )
    .await;
    let url = d.proxy_url("/");
    let held: Vec<_> = ["scanner-a", "scanner-b"]
        .into_iter()
        .map(|who| {
            let url = url.clone();
            tokio::spawn(async move {
                get(&url, &[("x-test-who", who), ("x-test-delay-ms", "3600000")]).await
            })
        })
        .collect();
    wait_until("two held requests", || d.gate.held() == 2).await;
    let (parts, _) = get(
        &url,
        &[("x-test-who", "scanner-c"), ("x-test-delay-ms", "5000")],
    )
    .await;
    assert_eq!(parts.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&parts, "retry-after"), "5");
    assert_eq!(d.gate.refused(), 1);
    for h in held {
        h.abort();
    }
}

/// A client that gives up frees its slot: the held future is dropped with the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_held_request_frees_its_slot() {
    let up = start_upstream().await;
    let d = start(
        settings(Some(up.addr), "max_held_per_identity = 1\n"),
        by_header(),
    )
    .await;
    let addr = d.proxy.unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let mut raw = tokio::net::TcpStream::connect(addr).await.unwrap();
        raw.write_all(
            b"GET / HTTP/1.1\r\nhost: x\r\nx-test-who: scanner\r\nx-test-delay-ms: 3600000\r\n\r\n",
        )
        .await
        .unwrap();
        wait_until("held", || d.gate.held() == 1).await;
        // `raw` dropped here: the client hangs up.
    }
    // hyper notices the closed connection when it next polls it; the slot must come back.
    wait_until("slot released", || d.gate.held() == 0).await;
}

/// `/v1/auth` holds a delayed request before answering 204; under paused time nothing waits.
#[tokio::test(start_paused = true)]
async fn auth_request_holds_delays_on_a_timer() {
    let decider = scripted(|_req: &limiter_daemon::engine::decider::RequestView<'_>| {
        delay(Tier::Anon, 60_000, DelayKind::Hard, "scanner")
    });
    let state = ApiState {
        steps: Arc::new(Steps {
            decider,
            gate: HoldGate::new(10, 2),
            hints: Hints::default(),
            grace_over: Default::default(),
            access_log: Default::default(),
            overload: None,
        }),
        trusted_peers: Arc::new(vec!["127.0.0.0/8".parse().unwrap()]),
        limits: Default::default(),
        token: None,
    };
    let gate = Arc::clone(&state.steps.gate);
    let app = router(state).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
    let req = || {
        Request::get("/v1/auth")
            .header("x-original-uri", "/api/feeds")
            .header("x-real-ip", "203.0.113.9")
            .body(Body::empty())
            .unwrap()
    };
    let t0 = tokio::time::Instant::now();
    let fut = app.clone().oneshot(req());
    tokio::pin!(fut);
    // Still held after 59 s of (virtual) time.
    assert!(tokio::time::timeout(Duration::from_secs(59), &mut fut)
        .await
        .is_err());
    assert_eq!(gate.held(), 1);
    let resp = fut.await.unwrap();
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert!(t0.elapsed() >= Duration::from_secs(60));
    assert_eq!(resp.headers()["x-quota-warning"], "0 units left today");
    assert_eq!(gate.held(), 0);
}

/// Sends `request` (held for an hour) on a raw socket, stops the daemon, and returns the
/// status, fields and body the client read before the connection closed.
async fn held_through_shutdown(
    own_loop: bool,
    request: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    // More fields than the own loop parses: every request takes hyper's server.
    let hyper_only = if own_loop {
        ""
    } else {
        "max_header_count = 128\n"
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = start_upstream().await;
    let d = start(
        settings(
            Some(up.addr),
            &format!("shutdown_grace = \"200ms\"\n{hyper_only}"),
        ),
        by_header(),
    )
    .await;
    let gate = Arc::clone(&d.gate);
    let mut raw = tokio::net::TcpStream::connect(d.proxy.unwrap())
        .await
        .unwrap();
    raw.write_all(request).await.unwrap();
    wait_until("held", || gate.held() == 1).await;
    let stopping = tokio::spawn(d.stop());
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), raw.read_to_end(&mut got))
        .await
        .expect("the connection closes within the deadline")
        .expect("read");
    stopping.await.unwrap();
    assert_eq!(gate.held(), 0);
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut fields);
    let len = match resp.parse(&got) {
        Ok(httparse::Status::Complete(len)) => len,
        other => panic!(
            "no complete answer ({other:?}): {:?}",
            String::from_utf8_lossy(&got)
        ),
    };
    let headers = resp
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    (resp.code.unwrap(), headers, got[len..].to_vec())
}

const HELD_GET: &[u8] =
    b"GET / HTTP/1.1\r\nhost: x\r\nx-test-who: scanner\r\nx-test-delay-ms: 3600000\r\n\r\n";
const HELD_POST: &[u8] = b"POST /upload HTTP/1.1\r\nhost: x\r\nx-test-who: scanner\r\n\
    x-test-delay-ms: 3600000\r\ncontent-length: 5\r\n\r\nhello";

/// A request still held when the shutdown grace period ends gets a 503 saying when to come back,
/// not an empty reply; on the own loop and through hyper, with and without a body.
async fn held_request_is_answered_at_the_end_of_the_grace_period(own_loop: bool) {
    for request in [HELD_GET, HELD_POST] {
        let (status, headers, body) = held_through_shutdown(own_loop, request).await;
        let what = String::from_utf8_lossy(&request[..4]);
        let field = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .unwrap_or_else(|| panic!("{what}: no {name} in {headers:?}"))
        };
        assert_eq!(status, 503, "{what}");
        let retry: u64 = field("retry-after").parse().unwrap();
        assert!(
            (3590..=3600).contains(&retry),
            "{what}: retry-after {retry}"
        );
        assert_eq!(field("content-type"), "application/problem+json");
        assert_eq!(field("connection"), "close");
        assert_eq!(field("x-ratelimit-tier"), "anon");
        let v = json(&bytes::Bytes::from(body));
        assert_eq!(v["status"], 503, "{what}");
        assert_eq!(v["retryAfter"], retry, "{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_request_is_answered_at_the_end_of_the_grace_period_own_loop() {
    held_request_is_answered_at_the_end_of_the_grace_period(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_request_is_answered_at_the_end_of_the_grace_period_hyper() {
    held_request_is_answered_at_the_end_of_the_grace_period(false).await;
}

/// A held request with a body waits before hyper's connection exists, then goes through hyper
/// with that decision: decided (and counted) once, its body forwarded whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_request_with_a_body_is_decided_once_and_forwarded() {
    let up = start_upstream().await;
    let decider = by_header();
    let d = start(settings(Some(up.addr), ""), decider.clone()).await;
    let t0 = Instant::now();
    let (parts, body) = send(
        Request::post(d.proxy_url("/upload"))
            .header("x-test-who", "scanner")
            .header("x-test-delay-ms", "100")
            .body(http_support::body("hello"))
            .unwrap(),
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
    assert!(t0.elapsed() >= Duration::from_millis(100));
    assert_eq!(json(&body)["len"], 5);
    assert_eq!(header(&parts, "x-quota-warning"), "0 units left today");
    assert_eq!(decider.seen.lock().len(), 1, "decided once");
    assert_eq!(d.gate.admitted(), 1);
    assert_eq!(d.gate.held(), 0);
}
