//! Reverse-proxy fidelity against a real upstream server on loopback: large streamed bodies both
//! ways, pass-through of status/headers/body, header hygiene, keep-alive reuse, 502/504, and
//! header limits. Decisions are scripted here (allow); the engine-backed responses are in
//! `http_engine.rs`.

use crate::http_support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use http_support::*;
use hyper::body::Frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIG: u64 = 64 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_upload_streams_through_intact() {
    let up = start_upstream().await;
    let d = start(settings(Some(up.addr), ""), by_header()).await;
    let chunks = BIG / CHUNK as u64;
    let mut expect = Checksum::default();
    for i in 0..chunks {
        expect.update(&chunk(i, CHUNK));
    }
    let stream = futures_util::stream::iter(0..chunks)
        .map(|i| Ok::<_, std::io::Error>(Frame::data(chunk(i, CHUNK))));
    let req = Request::post(d.proxy_url("/upload"))
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap();
    let (parts, bytes) = send(req).await;
    assert_eq!(parts.status, StatusCode::OK);
    let v = json(&bytes);
    let (h, len) = expect.finish();
    assert_eq!(v["len"], len);
    assert_eq!(v["hash"], h.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_download_streams_through_intact() {
    let up = start_upstream().await;
    let d = start(settings(Some(up.addr), ""), by_header()).await;
    let resp = client()
        .request(
            Request::get(d.proxy_url(&format!("/download/{BIG}")))
                .body(empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["x-total"], BIG.to_string().as_str());
    let mut body = resp.into_body();
    let mut got = Checksum::default();
    while let Some(frame) = body.frame().await {
        if let Some(data) = frame.unwrap().data_ref() {
            got.update(data);
        }
    }
    let mut expect = Checksum::default();
    for i in 0..BIG / CHUNK as u64 {
        expect.update(&chunk(i, CHUNK));
    }
    assert_eq!(got.finish(), expect.finish());
}

/// The first chunk of the upstream's response reaches the client while the upstream still
/// holds back the rest: the proxy does not buffer whole bodies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_body_is_streamed_not_buffered() {
    let up = start_upstream().await;
    let d = start(settings(Some(up.addr), ""), by_header()).await;
    let resp = client()
        .request(Request::get(d.proxy_url("/trickle")).body(empty()).unwrap())
        .await
        .unwrap();
    let mut body = resp.into_body();
    let first = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("first chunk should arrive before the upstream finishes")
        .unwrap()
        .unwrap();
    assert_eq!(first.into_data().unwrap(), Bytes::from_static(b"first"));
    up.state.release.notify_one();
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(rest, Bytes::from_static(b"second"));
}

/// The upstream sees the first chunk of the request body while the client has not sent the
/// rest (and will not until the upstream saw the first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_body_is_streamed_not_buffered() {
    let up = start_upstream().await;
    let d = start(settings(Some(up.addr), ""), by_header()).await;
    let st = up.state.clone();
    let stream = futures_util::stream::unfold(0u8, move |step| {
        let st = st.clone();
        async move {
            match step {
                0 => Some((
                    Ok::<_, std::io::Error>(Frame::data(Bytes::from_static(b"first"))),
                    1,
                )),
                1 => {
                    st.first_chunk_seen.notified().await;
                    Some((Ok(Frame::data(Bytes::from_static(b"second"))), 2))
                }
                _ => None,
            }
        }
    });
    let req = Request::post(d.proxy_url("/upload-gated"))
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap();
    let (parts, bytes) = tokio::time::timeout(Duration::from_secs(10), send(req))
        .await
        .expect("upload should complete: the proxy must forward the first chunk before the last");
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(json(&bytes)["len"], 11);
}

#[tokio::test]
async fn upstream_status_headers_and_body_pass_through() {
    let up = start_upstream().await;
    let d = start(settings(Some(up.addr), ""), by_header()).await;
    for code in [200u16, 201, 404, 418, 500, 503] {
        let (parts, body) = get(&d.proxy_url(&format!("/status/{code}")), &[]).await;
        assert_eq!(parts.status.as_u16(), code);
        assert_eq!(body, format!("body of {code}"));
        assert_eq!(header(&parts, "x-upstream"), "yes");
        assert_eq!(header(&parts, "content-type"), "text/x-test");
        let cookies: Vec<_> = parts
            .headers
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(cookies, vec!["a=1; Path=/", "b=2; Path=/"]);
        // Hop-by-hop fields named by the upstream's Connection header stop at the proxy.
        assert!(parts.headers.get("x-upstream-hop").is_none());
        // Allowed responses carry the tier and the remaining budget.
        assert_eq!(header(&parts, "x-ratelimit-tier"), "anon");
        assert_eq!(header(&parts, "x-ratelimit-remaining"), "100");
        assert_eq!(header(&parts, "x-ratelimit-limit"), "120");
        assert_eq!(header(&parts, "x-ratelimit-limit-hour"), "600");
    }
}

#[tokio::test]
async fn forwarded_for_is_appended_and_hop_by_hop_fields_stripped() {
    let up = start_upstream().await;
    let d = start(settings(Some(up.addr), ""), by_header()).await;
    let (parts, body) = get(
        &d.proxy_url("/headers?x=1&y=%20"),
        &[
            ("x-forwarded-for", "198.51.100.7"),
            ("connection", "keep-alive, x-hop"),
            ("x-hop", "1"),
            ("proxy-authorization", "Basic Zm9vOmJhcg=="),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("x-custom", "kept as is"),
            ("cookie", "session=abc"),
            ("host", "app.example"),
        ],
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
    let v = json(&body);
    assert_eq!(v["uri"], "/headers?x=1&y=%20");
    assert_eq!(v["method"], "GET");
    let headers: Vec<(String, String)> = serde_json::from_value(v["headers"].clone()).unwrap();
    let get = |n: &str| {
        headers
            .iter()
            .filter(|(k, _)| k == n)
            .map(|(_, v)| v.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(get("x-forwarded-for"), vec!["198.51.100.7, 127.0.0.1"]);
    assert_eq!(get("x-custom"), vec!["kept as is"]);
    assert_eq!(get("cookie"), vec!["session=abc"]);
    assert_eq!(get("host"), vec!["app.example"]);
    for hop in ["x-hop", "proxy-authorization", "te", "upgrade"] {
        assert!(get(hop).is_empty(), "{hop} reached the upstream");
    }
    // The decider saw the request as the client sent it, with the TCP peer.
    let _ = parts;
}

#[tokio::test]
async fn upstream_connections_are_kept_alive_and_reused() {
    let up = start_upstream().await;
    let d = start(settings(Some(up.addr), ""), by_header()).await;
    for _ in 0..20 {
        let (parts, _) = get(&d.proxy_url("/"), &[]).await;
        assert_eq!(parts.status, StatusCode::OK);
    }
    assert_eq!(up.state.requests.load(Ordering::SeqCst), 20);
    let conns = up.state.connections.load(Ordering::SeqCst);
    assert!(
        conns <= 2,
        "20 sequential requests opened {conns} upstream connections"
    );
}

#[tokio::test]
async fn upstream_down_gives_502_problem() {
    let dead = dead_addr().await;
    let d = start(
        settings(Some(dead), "connect_timeout = \"2s\"\n"),
        by_header(),
    )
    .await;
    let (parts, body) = get(&d.proxy_url("/anything"), &[]).await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY);
    assert_eq!(header(&parts, "content-type"), "application/problem+json");
    let v = json(&body);
    assert_eq!(v["status"], 502);
    assert_eq!(v["title"], "Bad Gateway");
    // The request was metered: the caller still learns its tier and what it has left.
    assert!(!header(&parts, "x-ratelimit-tier").is_empty(), "{parts:?}");
    assert!(
        !header(&parts, "x-ratelimit-remaining").is_empty(),
        "{parts:?}"
    );
    assert!(
        v["detail"].as_str().unwrap().contains("cannot be reached"),
        "{v}"
    );
}

#[tokio::test]
async fn slow_upstream_gives_504_problem_within_the_timeout() {
    let up = start_upstream().await;
    let d = start(
        settings(Some(up.addr), "response_timeout = \"300ms\"\n"),
        by_header(),
    )
    .await;
    let t0 = Instant::now();
    let (parts, body) = get(&d.proxy_url("/hang"), &[]).await;
    let took = t0.elapsed();
    assert_eq!(parts.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(header(&parts, "content-type"), "application/problem+json");
    assert_eq!(json(&body)["status"], 504);
    assert!(!header(&parts, "x-ratelimit-tier").is_empty(), "{parts:?}");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "took {took:?}"
    );
}

#[tokio::test]
async fn header_limits_give_431_and_malformed_heads_400_without_harm() {
    let up = start_upstream().await;
    let d = start(
        settings(
            Some(up.addr),
            "max_header_count = 20\nmax_header_bytes = 2048\n",
        ),
        by_header(),
    )
    .await;
    // Over our count: problem document naming the limit.
    let many: Vec<(String, String)> = (0..30).map(|i| (format!("x-h{i}"), "v".into())).collect();
    let many_ref: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (parts, body) = get(&d.proxy_url("/"), &many_ref).await;
    assert_eq!(parts.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert!(json(&body)["detail"]
        .as_str()
        .unwrap()
        .contains("31 header fields"));
    // Over our byte budget.
    let big = "v".repeat(3000);
    let (parts, body) = get(&d.proxy_url("/"), &[("x-big", big.as_str())]).await;
    assert_eq!(parts.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert!(json(&body)["detail"]
        .as_str()
        .unwrap()
        .contains("bytes of header fields"));
    // Far over: the parser stops it (still a 431, connection closed, nothing panics).
    let mut raw = tokio::net::TcpStream::connect(d.proxy.unwrap())
        .await
        .unwrap();
    let mut head = String::from("GET / HTTP/1.1\r\nhost: x\r\n");
    for i in 0..500 {
        head.push_str(&format!("x-flood-{i}: v\r\n"));
    }
    head.push_str("\r\n");
    raw.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    raw.read_to_end(&mut answer).await.unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 431"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // Malformed request line.
    let mut raw = tokio::net::TcpStream::connect(d.proxy.unwrap())
        .await
        .unwrap();
    raw.write_all(b"NOT A REQUEST\x01\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    raw.read_to_end(&mut answer).await.unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 400"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // The proxy still serves.
    let (parts, _) = get(&d.proxy_url("/"), &[]).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(
        up.state.requests.load(Ordering::SeqCst),
        1,
        "rejected heads must not reach the upstream"
    );
}

#[tokio::test]
async fn shutdown_future_stops_the_listeners() {
    let up = start_upstream().await;
    let d = start(settings(Some(up.addr), ""), by_header()).await;
    let addr = d.proxy.unwrap();
    let (parts, _) = get(&d.proxy_url("/"), &[]).await;
    assert_eq!(parts.status, StatusCode::OK);
    d.stop().await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "listener still open after shutdown"
    );
}

/// An upstream that silently closes every keep-alive connection after one response: the
/// proxy must notice the dead pooled connection (or get its unsent request back) and use a new
/// one, never answering 502 for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_closing_idle_connections_is_survived() {
    // Close without `connection: close`: the proxy's pooled connection goes stale.
    let (addr, accepted) =
        scripted_upstream(|_| (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", true)).await;
    let d = start(settings(Some(addr), ""), by_header()).await;
    for i in 0..10 {
        let (parts, body) = get(&d.proxy_url("/"), &[]).await;
        assert_eq!(parts.status, StatusCode::OK, "request {i}: {body:?}");
        assert_eq!(body, "ok");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        10,
        "each request needed a new connection"
    );
}

/// The direct path (bodyless GET/HEAD) frames every kind of upstream response right: chunked
/// with extensions and trailers, close-delimited, HEAD and 304 without a body; a connection is
/// reused only when the response was read to a clean end.
#[tokio::test]
async fn bodyless_requests_handle_every_response_framing() {
    let (addr, accepted) = scripted_upstream(|line| match line {
        "GET /chunked HTTP/1.1" => (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nx-trailer: t\r\n\r\n",
            false,
        ),
        "GET /until-close HTTP/1.1" => (b"HTTP/1.1 200 OK\r\n\r\nread until close", true),
        "HEAD /sized HTTP/1.1" => (b"HTTP/1.1 200 OK\r\ncontent-length: 1234\r\n\r\n", false),
        "GET /not-modified HTTP/1.1" => (b"HTTP/1.1 304 Not Modified\r\netag: \"e\"\r\n\r\n", false),
        "GET /interim HTTP/1.1" => (
            b"HTTP/1.1 103 Early Hints\r\nlink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfinal",
            false,
        ),
        "GET /bad-length HTTP/1.1" => (
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd",
            true,
        ),
        _ => (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", false),
    })
    .await;
    // One proxy thread, so one pool: connection counts are exact.
    let d = start(settings(Some(addr), "worker_threads = 1\n"), by_header()).await;

    let (parts, body) = get(&d.proxy_url("/chunked"), &[]).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(body, "hello, world");
    let (_, body) = get(&d.proxy_url("/plain"), &[]).await;
    assert_eq!(body, "ok");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "a chunked response read to its end leaves the connection reusable"
    );

    let (parts, body) = get(&d.proxy_url("/until-close"), &[]).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(body, "read until close");

    let req = Request::head(d.proxy_url("/sized")).body(empty()).unwrap();
    let (parts, body) = send(req).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(header(&parts, "content-length"), "1234");
    assert!(body.is_empty());

    let (parts, body) = get(&d.proxy_url("/not-modified"), &[]).await;
    assert_eq!(parts.status, StatusCode::NOT_MODIFIED);
    assert_eq!(header(&parts, "etag"), "\"e\"");
    assert!(body.is_empty());

    let (parts, body) = get(&d.proxy_url("/interim"), &[]).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(body, "final");
    assert!(
        parts.headers.get("link").is_none(),
        "interim fields stay behind"
    );

    let (_, body) = get(&d.proxy_url("/plain"), &[]).await;
    assert_eq!(body, "ok");
    // One connection before the close-delimited answer, one after it (HEAD, 304, 103 reused it).
    assert_eq!(accepted.load(Ordering::SeqCst), 2);

    let (parts, body) = get(&d.proxy_url("/bad-length"), &[]).await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY, "{body:?}");
    assert_eq!(header(&parts, "content-type"), "application/problem+json");
}
