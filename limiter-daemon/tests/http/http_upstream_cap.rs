//! `[http] upstream_max_connections`: however many requests are released at once, no more
//! connections are open to the upstream than the cap (per proxy thread; one thread here), the
//! rest wait in line and are all answered, and one waiting past `response_timeout` gets 504.
//! Each check runs with the own loop on and off, on both client paths (bodyless GETs on the
//! direct path, POSTs through hyper's client). One kind per run: a connection closed to hand its
//! slot to the other kind is still counted by the upstream until it reads the close, which
//! would make the upstream's own count overshoot by a connection being closed (the pool's unit
//! tests cover mixed kinds).

use crate::http_support;

use std::sync::atomic::Ordering;

use http::{Request, StatusCode};
use http_support::*;

fn capped(
    up: std::net::SocketAddr,
    own_loop: bool,
    extra: &str,
) -> limiter_daemon::config::http::HttpSettings {
    // More fields than the own loop parses: every request takes hyper's server.
    let hyper_only = if own_loop {
        ""
    } else {
        "max_header_count = 128\n"
    };
    settings(
        Some(up),
        &format!(
            "worker_threads = 1\nmax_held = 1000\nmax_held_per_identity = 1000\n\
             {hyper_only}{extra}"
        ),
    )
}

async fn released_together_stay_under_the_cap(own_loop: bool) {
    for post in [false, true] {
        released_together(own_loop, post).await;
    }
}

async fn released_together(own_loop: bool, post: bool) {
    let up = start_upstream().await;
    let d = start(
        capped(up.addr, own_loop, "upstream_max_connections = 4\n"),
        by_header(),
    )
    .await;
    // Held for the same 200 ms, then released together, as a scan delay's end releases them.
    let requests: Vec<_> = (0..60)
        .map(|i| {
            let url = d.proxy_url("/slow");
            tokio::spawn(async move {
                let who = format!("scanner-{i}");
                let b = if post {
                    Request::post(&url).header("content-length", "2")
                } else {
                    Request::get(&url)
                };
                let req = b
                    .header("x-test-who", who)
                    .header("x-test-delay-ms", "200")
                    .body(if post { body("hi") } else { empty() })
                    .unwrap();
                send(req).await.0.status
            })
        })
        .collect();
    for r in requests {
        assert_eq!(
            r.await.unwrap(),
            StatusCode::OK,
            "every request is answered"
        );
    }
    let most = up.state.max_open.load(Ordering::SeqCst);
    assert!(
        most <= 4,
        "post {post}: {most} upstream connections were open at once"
    );
    assert_eq!(up.state.requests.load(Ordering::SeqCst), 60);
    assert!(d.upstream.open.load(Ordering::SeqCst) <= 4);
    assert_eq!(d.upstream.waiting.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_together_stay_under_the_cap_own_loop() {
    released_together_stay_under_the_cap(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_together_stay_under_the_cap_hyper() {
    released_together_stay_under_the_cap(false).await;
}

async fn waiting_past_the_response_timeout_is_a_504(own_loop: bool) {
    let up = start_upstream().await;
    let d = start(
        capped(
            up.addr,
            own_loop,
            "upstream_max_connections = 1\nresponse_timeout = \"300ms\"\n",
        ),
        by_header(),
    )
    .await;
    // The only connection streams a body that waits on the test.
    let resp = client()
        .request(Request::get(d.proxy_url("/trickle")).body(empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let (parts, body) = get(&d.proxy_url("/"), &[]).await;
    assert_eq!(parts.status, StatusCode::GATEWAY_TIMEOUT, "{body:?}");
    assert_eq!(header(&parts, "content-type"), "application/problem+json");
    assert_eq!(up.state.max_open.load(Ordering::SeqCst), 1);
    // Once the connection is free again, the next request is served on it.
    up.state.release.notify_one();
    let got = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap();
    assert_eq!(&got.to_bytes()[..], b"firstsecond");
    let (parts, _) = get(&d.proxy_url("/"), &[]).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(up.state.max_open.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_past_the_response_timeout_is_a_504_own_loop() {
    waiting_past_the_response_timeout_is_a_504(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_past_the_response_timeout_is_a_504_hyper() {
    waiting_past_the_response_timeout_is_a_504(false).await;
}
