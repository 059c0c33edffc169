//! The proxy's own HTTP/1.1 loop (`http::front`), spoken to over raw sockets so every byte on
//! the wire is checked: pipelined requests, hand-over to hyper mid-connection (HTTP/1.0, a
//! body), `Connection: close`, the header-read deadline, HEAD answers without a body, and the
//! upstream's hop-by-hop and rate-limit fields. Each check runs with the loop on and with
//! `max_header_count = 128`, more fields than the loop parses (every request through hyper): the two must answer alike.

use crate::http_support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use http_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One response as read off the wire.
#[derive(Debug)]
struct Wire {
    version: u8,
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Wire {
    fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Splits `bytes` into responses; `head_only[i]` says response `i` answers a HEAD.
fn responses(mut bytes: &[u8], head_only: &[bool]) -> Vec<Wire> {
    let mut out = Vec::new();
    for &head in head_only {
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut r = httparse::Response::new(&mut fields);
        let len = match r.parse(bytes) {
            Ok(httparse::Status::Complete(len)) => len,
            other => panic!(
                "response {} incomplete ({other:?}): {:?}",
                out.len(),
                String::from_utf8_lossy(bytes)
            ),
        };
        let headers: Vec<(String, String)> = r
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        let (version, status) = (r.version.unwrap(), r.code.unwrap());
        bytes = &bytes[len..];
        let mut wire = Wire {
            version,
            status,
            headers,
            body: Vec::new(),
        };
        if !head {
            if let Some(n) = wire.get("content-length") {
                let n: usize = n.parse().unwrap();
                wire.body = bytes[..n].to_vec();
                bytes = &bytes[n..];
            } else if wire.get("transfer-encoding") == Some("chunked") {
                loop {
                    let line_end = bytes.windows(2).position(|w| w == b"\r\n").unwrap();
                    let size = usize::from_str_radix(
                        std::str::from_utf8(&bytes[..line_end]).unwrap().trim(),
                        16,
                    )
                    .unwrap();
                    bytes = &bytes[line_end + 2..];
                    if size == 0 {
                        assert_eq!(&bytes[..2], b"\r\n", "no trailers expected");
                        bytes = &bytes[2..];
                        break;
                    }
                    wire.body.extend_from_slice(&bytes[..size]);
                    assert_eq!(&bytes[size..size + 2], b"\r\n");
                    bytes = &bytes[size + 2..];
                }
            }
        }
        out.push(wire);
    }
    assert!(
        bytes.is_empty(),
        "bytes after the expected responses: {:?}",
        String::from_utf8_lossy(bytes)
    );
    out
}

/// `[http]` extras for each way of serving: the proxy's own loop, then hyper for everything.
const PATHS: [&str; 2] = ["", "max_header_count = 128\n"];

/// Writes `requests` in one write and reads until the proxy closes (the last request asks it
/// to), within a deadline.
async fn converse(addr: std::net::SocketAddr, requests: &str) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(requests.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got))
        .await
        .expect("the proxy closes after the last request")
        .unwrap();
    got
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_on_one_connection() {
    for path in PATHS {
        let up = start_upstream().await;
        let d = start(
            settings(Some(up.addr), &format!("worker_threads = 1\n{path}")),
            by_header(),
        )
        .await;
        let got = converse(
            d.proxy.unwrap(),
            "GET /status/201 HTTP/1.1\r\nhost: a\r\n\r\n\
         GET /status/404 HTTP/1.1\r\nhost: a\r\n\r\n\
         GET /status/202 HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n",
        )
        .await;
        let r = responses(&got, &[false, false, false]);
        let statuses: Vec<u16> = r.iter().map(|w| w.status).collect();
        assert_eq!(statuses, [201, 404, 202]);
        assert_eq!(r[1].body, b"body of 404");
        for w in &r {
            assert_eq!(w.version, 1);
            assert_eq!(w.get("x-ratelimit-tier"), Some("anon"));
            assert!(w.get("date").is_some());
        }
        assert_eq!(r[2].get("connection"), Some("close"));
        assert_eq!(
            r[0].get("connection"),
            None,
            "keep-alive is the 1.1 default"
        );
        assert_eq!(up.state.requests.load(Ordering::SeqCst), 3);
    }
}

#[tokio::test]
async fn http10_and_requests_with_a_body_are_handed_to_hyper() {
    for path in PATHS {
        let up = start_upstream().await;
        let d = start(settings(Some(up.addr), path), by_header()).await;
        // HTTP/1.0: answered in 1.0 (by hyper), forwarded with X-Forwarded-For like the rest.
        let got = converse(d.proxy.unwrap(), "GET /headers HTTP/1.0\r\nhost: a\r\n\r\n").await;
        let r = responses(&got, &[false]);
        assert_eq!((r[0].version, r[0].status), (0, 200));
        let seen = String::from_utf8_lossy(&r[0].body).into_owned();
        assert!(seen.contains("x-forwarded-for"), "{seen}");
        assert_eq!(r[0].get("x-ratelimit-tier"), Some("anon"));

        // A bodyless GET first (this loop), then a POST (hyper), then a GET (hyper): one connection.
        let got = converse(
            d.proxy.unwrap(),
            "GET /status/201 HTTP/1.1\r\nhost: a\r\n\r\n\
         POST /upload HTTP/1.1\r\nhost: a\r\ncontent-length: 5\r\n\r\nhello\
         GET /status/202 HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n",
        )
        .await;
        let r = responses(&got, &[false, false, false]);
        assert_eq!(r[0].status, 201);
        assert_eq!(r[1].status, 200);
        let upload: serde_json::Value = serde_json::from_slice(&r[1].body).unwrap();
        assert_eq!(upload["len"], 5, "the body reached the upstream intact");
        assert_eq!(r[2].status, 202);
    }
}

#[tokio::test]
async fn idle_and_half_sent_heads_are_cut_off_at_the_header_read_timeout() {
    for path in PATHS {
        let up = start_upstream().await;
        let d = start(
            settings(
                Some(up.addr),
                &format!("header_read_timeout = \"300ms\"\n{path}"),
            ),
            by_header(),
        )
        .await;
        // Nothing sent at all, a head cut off midway, and an idle keep-alive connection after one
        // answered request: each is closed by the proxy (the read sees EOF, not the test deadline).
        for opening in [
            "",
            "GET /status/200 HTTP/1.1\r\nhost",
            "GET / HTTP/1.1\r\nhost: a\r\n\r\n",
        ] {
            let mut s = TcpStream::connect(d.proxy.unwrap()).await.unwrap();
            s.write_all(opening.as_bytes()).await.unwrap();
            let mut got = Vec::new();
            tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got))
                .await
                .unwrap_or_else(|_| panic!("{opening:?}: connection left open"))
                .unwrap();
            let answered = opening.ends_with("\r\n\r\n");
            assert_eq!(
                got.starts_with(b"HTTP/1.1 200"),
                answered,
                "{path:?} {opening:?}: {}",
                String::from_utf8_lossy(&got)
            );
        }
    }
}

#[tokio::test]
async fn head_answers_carry_no_body() {
    for path in PATHS {
        let up = start_upstream().await;
        let d = start(settings(Some(up.addr), path), by_header()).await;
        let got = converse(
            d.proxy.unwrap(),
            "HEAD /status/200 HTTP/1.1\r\nhost: a\r\nx-test-who: burst\r\n\r\n\
         HEAD /status/200 HTTP/1.1\r\nhost: a\r\n\r\n\
         GET /status/203 HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n",
        )
        .await;
        // Were a body sent after either HEAD answer, the next response would not parse.
        let r = responses(&got, &[true, true, false]);
        assert_eq!(r[0].status, 429);
        assert!(r[0].get("content-length").unwrap().parse::<u32>().unwrap() > 0);
        assert_eq!(r[0].get("retry-after"), Some("42"));
        assert_eq!(r[1].status, 200);
        assert_eq!(r[2].status, 203);
    }
}

#[tokio::test]
async fn upstream_hop_fields_go_and_its_rate_limit_fields_are_replaced() {
    let (addr, _) = scripted_upstream(|_| {
        (
            b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nX-Hop: secret\r\n\
              Keep-Alive: timeout=5\r\nX-RateLimit-Tier: upstream-says\r\nRateLimit: nonsense\r\n\
              X-App: kept\r\nX-App: twice\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
              Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            false,
        )
    })
    .await;
    for path in PATHS {
        let d = start(settings(Some(addr), path), by_header()).await;
        let got = converse(
            d.proxy.unwrap(),
            "GET /x HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n",
        )
        .await;
        let r = &responses(&got, &[false])[0];
        assert_eq!(r.body, b"abc");
        assert_eq!(r.get("x-hop"), None);
        assert_eq!(r.get("keep-alive"), None);
        assert_eq!(r.all("x-ratelimit-tier"), ["anon"]);
        assert_eq!(r.all("ratelimit").len(), 1);
        assert_ne!(r.get("ratelimit"), Some("nonsense"));
        assert_eq!(r.all("x-app"), ["kept", "twice"]);
        assert_eq!(
            r.all("date"),
            ["Sun, 06 Nov 1994 08:49:37 GMT"],
            "the upstream's Date passes, no second one is added"
        );
        assert_eq!(r.get("transfer-encoding"), Some("chunked"));
    }
}

/// On the proxy's own loop the decision sees only the fields the decider says it reads, and
/// `Accept` (which chooses a refusal's format); under hyper it sees them all. (This is also what
/// shows the loop served the request.)
#[tokio::test]
async fn the_decision_sees_only_the_fields_it_reads_on_the_own_loop() {
    struct WhoOnly(std::sync::Arc<Scripted<DecideFn>>);
    impl limiter_daemon::engine::decider::Decider for WhoOnly {
        fn decide(
            &self,
            req: &limiter_daemon::engine::decider::RequestView<'_>,
        ) -> limiter_daemon::model::Decision {
            self.0.decide(req)
        }
        fn reads_header(&self, name: &[u8]) -> bool {
            name.eq_ignore_ascii_case(b"x-test-who")
        }
    }
    let up = start_upstream().await;
    for (path, fields_seen) in [(PATHS[0], 2), (PATHS[1], 4)] {
        let decider = by_header();
        let d = start(
            settings(Some(up.addr), path),
            std::sync::Arc::new(WhoOnly(std::sync::Arc::clone(&decider))),
        )
        .await;
        let got = converse(
            d.proxy.unwrap(),
            "GET /p?q=1 HTTP/1.1\r\nHost: a\r\nX-Test-Who: burst\r\nAccept: */*\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(responses(&got, &[false])[0].status, 429);
        let seen = decider.seen.lock();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].path, "/p");
        assert_eq!(seen[0].method, "GET");
        assert_eq!(
            seen[0].headers.len(),
            fields_seen,
            "{path:?}: {:?}",
            seen[0].headers
        );
        assert_eq!(seen[0].headers["x-test-who"], "burst");
        assert_eq!(seen[0].headers["accept"], "*/*");
    }
}

/// RFC 9112 §3.2 and the request-line limit, alike on both paths: exactly one valid `Host` on
/// HTTP/1.1 (400), a target over 8 KiB (414, not 431), and no `CONNECT` tunnels (405). None of
/// these reaches the upstream.
#[tokio::test]
async fn protocol_violations_are_refused_before_the_upstream() {
    let long = "a".repeat(100 * 1024);
    for path in PATHS {
        let up = start_upstream().await;
        let d = start(settings(Some(up.addr), path), by_header()).await;
        for (wire, status) in [
            ("GET / HTTP/1.1\r\naccept: */*\r\n\r\n".to_string(), 400),
            (
                "GET / HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n".to_string(),
                400,
            ),
            ("GET / HTTP/1.1\r\nhost: a b\r\n\r\n".to_string(), 400),
            (
                "POST /upload HTTP/1.1\r\ncontent-length: 1\r\n\r\nx".to_string(),
                400,
            ),
            (format!("GET /{long} HTTP/1.1\r\nhost: a\r\n\r\n"), 414),
            (
                "CONNECT upstream.example:443 HTTP/1.1\r\nhost: upstream.example:443\r\n\r\n"
                    .to_string(),
                405,
            ),
        ] {
            let mut s = TcpStream::connect(d.proxy.unwrap()).await.unwrap();
            // The proxy may answer (and close) before it has read all of a long head.
            let _ = s.write_all(wire.as_bytes()).await;
            let mut got = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got))
                .await
                .expect("answered and closed");
            let head = String::from_utf8_lossy(&got[..got.len().min(200)]).into_owned();
            assert!(
                head.starts_with(&format!("HTTP/1.1 {status} ")),
                "{path:?} {:?}: {head}",
                &wire[..wire.len().min(60)]
            );
            if status == 405 {
                assert!(head.to_ascii_lowercase().contains("allow: get"), "{head}");
            }
        }
        // HTTP/1.0 may leave Host out: it is forwarded, with the upstream's Host added.
        let got = converse(d.proxy.unwrap(), "GET /status/200 HTTP/1.0\r\n\r\n").await;
        assert_eq!(responses(&got, &[false])[0].status, 200, "{path:?}");
        assert_eq!(up.state.requests.load(Ordering::SeqCst), 1, "{path:?}");
    }
}

/// Behind a trusted proxy the client's address is in `X-Forwarded-For`: a decision that reads
/// it (and any field it reads, hop-by-hop names included) must see it on the own loop as under
/// hyper. The own loop used to fold the field away before handing the decision its fields,
/// so every client behind a trusted proxy was counted as the proxy (found by the
/// `request_head` fuzz target).
#[tokio::test]
async fn the_decision_sees_forwarded_for_and_hop_named_fields_it_reads_on_both_paths() {
    struct Reads(std::sync::Arc<Scripted<DecideFn>>);
    impl limiter_daemon::engine::decider::Decider for Reads {
        fn decide(
            &self,
            req: &limiter_daemon::engine::decider::RequestView<'_>,
        ) -> limiter_daemon::model::Decision {
            self.0.decide(req)
        }
        fn reads_header(&self, name: &[u8]) -> bool {
            name.eq_ignore_ascii_case(b"x-forwarded-for")
                || name.eq_ignore_ascii_case(b"proxy-api-key")
        }
    }
    let up = start_upstream().await;
    for path in PATHS {
        let decider = by_header();
        let d = start(
            settings(Some(up.addr), path),
            std::sync::Arc::new(Reads(std::sync::Arc::clone(&decider))),
        )
        .await;
        let got = converse(
            d.proxy.unwrap(),
            "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.7\r\n\
             Proxy-Api-Key: k\r\nx-forwarded-for: 10.0.0.2\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(responses(&got, &[false])[0].status, 200, "{path:?}");
        let seen = decider.seen.lock();
        assert_eq!(seen.len(), 1);
        let forwarded: Vec<_> = seen[0].headers.get_all("x-forwarded-for").iter().collect();
        assert_eq!(forwarded, ["203.0.113.7", "10.0.0.2"], "{path:?}");
        assert_eq!(seen[0].headers["proxy-api-key"], "k", "{path:?}");
    }
}
