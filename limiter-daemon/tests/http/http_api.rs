//! `POST /v1/decide` and `GET /v1/auth` mechanics on a real listener, with a scripted decider
//! (engine-backed answers are in `http_engine.rs`): JSON shape, 400s naming the field, client
//! resolution from `X-Real-IP` for trusted peers only; header and body limits (431, 413) that
//! no input can get past to a panic.

use crate::http_support;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use http_support::*;
use limiter_daemon::edge::render::response::Hints;
use limiter_daemon::edge::steps::hold::HoldGate;
use limiter_daemon::edge::steps::Steps;
use limiter_daemon::engine::decider::RequestView;
use limiter_daemon::model::{Reason, Tier};
use limiter_daemon::surfaces::api::router::router;
use limiter_daemon::surfaces::api::state::ApiState;
use tower::ServiceExt;

async fn post_json(url: &str, text: &str) -> (http::response::Parts, bytes::Bytes) {
    send(
        Request::post(url)
            .header("content-type", "application/json")
            .body(body(text.to_string()))
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn decide_answers_allow_with_headers() {
    let decider = by_header();
    let d = start(settings(None, ""), decider).await;
    let (parts, bytes) = post_json(
        &d.api_url("/v1/decide"),
        r#"{"ip":"203.0.113.5","method":"GET","path":"/api/search?q=1","headers":{"x-test-who":"reader"}}"#,
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(header(&parts, "content-type"), "application/json");
    let v = json(&bytes);
    assert_eq!(v["action"], "allow");
    assert_eq!(v["tier"], "anon");
    assert_eq!(v["reason"], serde_json::Value::Null);
    assert_eq!(v["delayMs"], 0);
    assert_eq!(v["retryAfter"], serde_json::Value::Null);
    assert_eq!(v["headers"]["x-ratelimit-tier"], "anon");
    assert_eq!(v["headers"]["x-ratelimit-remaining"], "100");
    assert_eq!(
        v["headers"]["ratelimit-policy"],
        "\"burst\";q=120;w=60, \"hourly\";q=600;w=3600, \"daily\";q=1000;w=86400"
    );
    assert!(v.get("problem").is_none());
}

#[tokio::test]
async fn decide_reports_reject_and_delay() {
    let d = start(settings(None, ""), by_header()).await;
    let (_, bytes) = post_json(
        &d.api_url("/v1/decide"),
        r#"{"ip":"203.0.113.5","path":"/","headers":{"x-test-who":"burst"}}"#,
    )
    .await;
    let v = json(&bytes);
    assert_eq!(v["action"], "reject");
    assert_eq!(v["reason"], "burst");
    assert_eq!(v["retryAfter"], 42);
    assert_eq!(v["headers"]["retry-after"], "42");
    assert_eq!(v["problem"]["status"], 429);
    assert_eq!(v["problem"]["reason"], "burst");
    assert!(v["problem"]["upgrade"].as_str().unwrap().contains("/login"));

    let (_, bytes) = post_json(
        &d.api_url("/v1/decide"),
        r#"{"ip":"203.0.113.5","path":"/","headers":{"x-test-who":"scanner","x-test-delay-ms":"5000"}}"#,
    )
    .await;
    let v = json(&bytes);
    assert_eq!(v["action"], "delay");
    assert_eq!(v["delayMs"], 5000);
    assert_eq!(v["headers"]["x-quota-warning"], "0 units left today");
    // The API never holds: the caller applies the delay; nothing was counted as held.
    assert_eq!(d.gate.admitted(), 0);
}

#[tokio::test]
async fn decide_passes_the_described_request_to_the_engine() {
    let decider = scripted(|_r: &RequestView<'_>| allow(Tier::Session, "x"));
    let d = start(settings(None, ""), decider.clone()).await;
    let (parts, _) = post_json(
        &d.api_url("/v1/decide"),
        r#"{"ip":"2001:db8::7","method":"DELETE","path":"/api/x?y=1","headers":{"cookie":"session=1","x-forwarded-for":"10.0.0.1"}}"#,
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
    let seen = decider.seen.lock()[0].clone();
    assert_eq!(seen.peer, "2001:db8::7".parse::<IpAddr>().unwrap());
    assert_eq!(seen.method, "DELETE");
    assert_eq!(seen.path, "/api/x");
    assert_eq!(seen.headers["cookie"], "session=1");
    assert!(seen.headers.get("x-forwarded-for").is_none());
}

/// Issue 21, P8: a web page in a browser on the host could POST a `text/plain` or form body to
/// the tokenless loopback API and strike any address. Only `application/json` is read (415
/// otherwise, naming `content-type`), and a browser's request from another origin is refused
/// (403, naming `origin` or `sec-fetch-site`); the decider never hears of either.
#[tokio::test]
async fn decide_refuses_what_a_page_on_another_origin_can_send() {
    let decider = scripted(|_r: &RequestView<'_>| allow(Tier::Anon, "x"));
    let d = start(settings(None, ""), decider.clone()).await;
    let url = d.api_url("/v1/decide");
    let host = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let json_body = r#"{"ip":"203.0.113.66","path":"/"}"#;
    let ask = |headers: &[(&str, &str)]| {
        let mut r = Request::post(&url);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        send(r.body(body(json_body)).unwrap())
    };
    for ct in [
        None,
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
    ] {
        let headers: Vec<(&str, &str)> = ct.map(|c| ("content-type", c)).into_iter().collect();
        let (parts, bytes) = ask(&headers).await;
        assert_eq!(parts.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct:?}");
        assert_eq!(header(&parts, "content-type"), "application/problem+json");
        let v = json(&bytes);
        assert_eq!(v["field"], "content-type", "{ct:?}: {v}");
        assert_eq!(v["status"], 415);
    }
    let json_ct = ("content-type", "application/json");
    for (extra, field) in [
        (("sec-fetch-site", "cross-site"), "sec-fetch-site"),
        (("sec-fetch-site", "same-site"), "sec-fetch-site"),
        (("origin", "http://evil.example"), "origin"),
        (("origin", "null"), "origin"),
    ] {
        let (parts, bytes) = ask(&[json_ct, extra]).await;
        assert_eq!(parts.status, StatusCode::FORBIDDEN, "{extra:?}");
        let v = json(&bytes);
        assert_eq!(v["field"], field, "{extra:?}: {v}");
    }
    assert!(
        decider.seen.lock().is_empty(),
        "a refused request was decided"
    );
    // Programs (no browser fields) and the API's own origin are answered.
    let own = format!("http://{host}");
    for extra in [
        vec![],
        vec![("origin", own.as_str())],
        vec![("sec-fetch-site", "same-origin")],
    ] {
        let mut h = vec![("content-type", "application/json; charset=utf-8")];
        h.extend(extra.iter().copied());
        let (parts, _) = ask(&h).await;
        assert_eq!(parts.status, StatusCode::OK, "{extra:?}");
    }
    assert_eq!(decider.seen.lock().len(), 3);
}

#[tokio::test]
async fn decide_malformed_input_is_400_naming_the_field() {
    let d = start(settings(None, ""), by_header()).await;
    let cases = [
        ("{not json", None, "not JSON"),
        ("[]", None, "JSON object"),
        (r#"{"path":"/"}"#, Some("ip"), "`ip` is missing"),
        (
            r#"{"ip":"999.1.1.1","path":"/"}"#,
            Some("ip"),
            "not an IPv4 or IPv6",
        ),
        (r#"{"ip":"1.2.3.4"}"#, Some("path"), "`path` is missing"),
        (
            r#"{"ip":"1.2.3.4","path":"nope"}"#,
            Some("path"),
            "must start with",
        ),
        (
            r#"{"ip":"1.2.3.4","path":"/","method":7}"#,
            Some("method"),
            "must be a string",
        ),
        (
            r#"{"ip":"1.2.3.4","path":"/","headers":{"a b":"c"}}"#,
            Some("headers.a b"),
            "header name",
        ),
        (
            r#"{"ip":"1.2.3.4","path":"/","headers":{"x":{"y":1}}}"#,
            Some("headers.x"),
            "string or a list",
        ),
    ];
    for (input, field, says) in cases {
        let (parts, bytes) = post_json(&d.api_url("/v1/decide"), input).await;
        assert_eq!(parts.status, StatusCode::BAD_REQUEST, "{input}");
        assert_eq!(header(&parts, "content-type"), "application/problem+json");
        let v = json(&bytes);
        assert_eq!(v["status"], 400);
        assert!(v["detail"].as_str().unwrap().contains(says), "{input}: {v}");
        match field {
            Some(f) => assert_eq!(v["field"], f, "{input}"),
            None => assert!(v.get("field").is_none()),
        }
    }
}

/// The probe's body: `n` distinct header names (25,000 once overflowed a `HeaderMap`, panicking
/// the worker with no answer to the client).
fn many_headers_body(n: usize) -> String {
    let entries: Vec<String> = (0..n).map(|i| format!(r#""x-h{i}":"v{i}""#)).collect();
    format!(
        r#"{{"ip":"203.0.113.9","path":"/","headers":{{{}}}}}"#,
        entries.join(",")
    )
}

async fn decide_still_answers(d: &Running) {
    let (parts, _) = post_json(
        &d.api_url("/v1/decide"),
        r#"{"ip":"203.0.113.9","path":"/"}"#,
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK, "the server keeps serving");
}

#[tokio::test]
async fn decide_with_25000_header_entries_is_refused_and_the_server_keeps_serving() {
    let body = many_headers_body(25_000);
    assert!(body.len() > 256 * 1024, "{}", body.len());
    // A limit large enough for the body to be read: the count refuses it.
    let d = start(settings(None, "api_max_body = 1048576"), by_header()).await;
    let (parts, bytes) = post_json(&d.api_url("/v1/decide"), &body).await;
    assert_eq!(parts.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert_eq!(header(&parts, "content-type"), "application/problem+json");
    let v = json(&bytes);
    assert_eq!(v["field"], "headers");
    assert!(v["detail"].as_str().unwrap().contains("64"), "{v}");
    decide_still_answers(&d).await;

    // Defaults: the body is over `api_max_body` and is not read whole.
    let d = start(settings(None, ""), by_header()).await;
    let (parts, bytes) = post_json(&d.api_url("/v1/decide"), &body).await;
    assert_eq!(parts.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(header(&parts, "content-type"), "application/problem+json");
    let v = json(&bytes);
    assert_eq!(v["status"], 413);
    assert!(v["detail"].as_str().unwrap().contains("65536"), "{v}");
    decide_still_answers(&d).await;
}

#[tokio::test]
async fn decide_counts_list_items_and_bytes_against_the_header_limits() {
    let d = start(
        settings(
            None,
            "max_header_count = 4
max_header_bytes = 1024",
        ),
        by_header(),
    )
    .await;
    let cases = [
        (
            r#"{"ip":"1.2.3.4","path":"/","headers":{"a":["1","2"],"b":["3","4"]}}"#,
            StatusCode::OK,
        ),
        (
            r#"{"ip":"1.2.3.4","path":"/","headers":{"a":["1","2"],"b":["3","4","5"]}}"#,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        ),
    ];
    for (input, status) in cases {
        let (parts, _) = post_json(&d.api_url("/v1/decide"), input).await;
        assert_eq!(parts.status, status, "{input}");
    }
    let big = format!(
        r#"{{"ip":"1.2.3.4","path":"/","headers":{{"a":"{}"}}}}"#,
        "v".repeat(1100)
    );
    let (parts, bytes) = post_json(&d.api_url("/v1/decide"), &big).await;
    assert_eq!(parts.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert!(json(&bytes)["detail"]
        .as_str()
        .unwrap()
        .contains("1024 bytes"));
}

#[tokio::test]
async fn auth_with_too_many_headers_is_431_and_the_server_keeps_serving() {
    let d = start(settings(None, ""), by_header()).await;
    let base = [("x-original-uri", "/page"), ("x-real-ip", "192.0.2.45")];
    // Over max_header_count (64) but under hyper's parser ceiling: our problem document;
    // far over it: hyper's own 431 while parsing.
    for n in [80, 500] {
        let names: Vec<String> = (0..n).map(|i| format!("x-h{i}")).collect();
        let mut headers: Vec<(&str, &str)> = base.to_vec();
        headers.extend(names.iter().map(|n| (n.as_str(), "v")));
        let (parts, _) = get(&d.api_url("/v1/auth"), &headers).await;
        assert_eq!(
            parts.status,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "{n}"
        );
    }
    let (parts, _) = get(&d.api_url("/v1/auth"), &base).await;
    assert_eq!(
        parts.status,
        StatusCode::NO_CONTENT,
        "the server keeps serving"
    );
}

#[tokio::test]
async fn auth_allows_with_204_and_rejects_with_429() {
    let decider = by_header();
    let d = start(settings(None, ""), decider).await;
    let (parts, bytes) = get(
        &d.api_url("/v1/auth"),
        &[("x-original-uri", "/page?x=1"), ("x-real-ip", "192.0.2.44")],
    )
    .await;
    assert_eq!(parts.status, StatusCode::NO_CONTENT);
    assert!(bytes.is_empty());
    assert_eq!(header(&parts, "x-ratelimit-tier"), "anon");
    assert_eq!(header(&parts, "x-ratelimit-remaining"), "100");

    let (parts, bytes) = get(
        &d.api_url("/v1/auth"),
        &[
            ("x-original-uri", "/page"),
            ("x-real-ip", "192.0.2.44"),
            ("x-test-who", "burst"),
        ],
    )
    .await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&parts, "retry-after"), "42");
    assert_eq!(header(&parts, "content-type"), "application/problem+json");
    let v = json(&bytes);
    assert_eq!(v["reason"], "burst");
    // The same document, compact, in a header nginx can replay.
    let replay: serde_json::Value =
        serde_json::from_str(header(&parts, "x-limiter-problem")).unwrap();
    assert_eq!(replay, v);
}

#[tokio::test]
async fn auth_missing_original_uri_is_400() {
    let d = start(settings(None, ""), by_header()).await;
    let (parts, bytes) = get(&d.api_url("/v1/auth"), &[]).await;
    assert_eq!(parts.status, StatusCode::BAD_REQUEST);
    assert!(json(&bytes)["detail"]
        .as_str()
        .unwrap()
        .contains("X-Original-URI"));
}

/// Issue 35, D4: a path with a dot segment is refused in every convention, naming where it
/// came from, and never decided; the problem travels in `x-limiter-problem` for nginx.
#[tokio::test]
async fn auth_refuses_a_dot_segment_in_every_convention() {
    let decider = by_header();
    let d = start(settings(None, ""), decider.clone()).await;
    for (url, headers, field) in [
        (
            "/v1/auth",
            vec![("x-original-uri", "/a/../b?x=1")],
            "x-original-uri",
        ),
        (
            "/v1/auth",
            vec![("x-forwarded-uri", "/a/%2E%2E/b")],
            "x-forwarded-uri",
        ),
        (
            "/v1/auth",
            vec![("x-forwarded-uri", "/a/..;/b")],
            "x-forwarded-uri",
        ),
        ("/v1/auth/envoy/a/..%2fb", vec![], "path"),
    ] {
        let (parts, bytes) = get(&d.api_url(url), &headers).await;
        assert_eq!(parts.status, StatusCode::BAD_REQUEST, "{headers:?}");
        let v = json(&bytes);
        assert_eq!(v["field"], field);
        assert!(v["detail"].as_str().unwrap().contains("dot segment"), "{v}");
        let replay: serde_json::Value =
            serde_json::from_str(header(&parts, "x-limiter-problem")).unwrap();
        assert_eq!(replay, v);
    }
    assert!(decider.seen.lock().is_empty(), "a refused path was decided");
    let (parts, _) = get(&d.api_url("/v1/auth"), &[("x-original-uri", "//%62")]).await;
    assert_eq!(parts.status, StatusCode::NO_CONTENT);
}

async fn auth_peer_seen(peer: SocketAddr, real_ip: &str) -> (IpAddr, bool) {
    let decider = scripted(|_r: &RequestView<'_>| allow(Tier::Anon, "x"));
    let state = ApiState {
        steps: Arc::new(Steps {
            decider: decider.clone(),
            gate: HoldGate::new(10, 2),
            hints: Hints::default(),
            grace_over: Default::default(),
            access_log: Default::default(),
            overload: None,
        }),
        trusted_peers: Arc::new(vec![
            "10.0.0.0/8".parse().unwrap(),
            "::1/128".parse().unwrap(),
        ]),
        limits: Default::default(),
        token: None,
    };
    let app = router(state).layer(MockConnectInfo(peer));
    let resp = app
        .oneshot(
            Request::get("/v1/auth")
                .header("x-original-uri", "/api/feeds?since=1")
                .header("x-original-method", "POST")
                .header("x-real-ip", real_ip)
                .header("x-forwarded-for", "172.16.0.9")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    let _ = resp.into_body().collect().await;
    let seen = decider.seen.lock()[0].clone();
    assert_eq!(seen.path, "/api/feeds");
    assert_eq!(seen.method, "POST");
    assert!(
        seen.headers.get("x-forwarded-for").is_none() && seen.headers.get("x-real-ip").is_none()
    );
    (seen.peer, seen.unattributed)
}

#[tokio::test]
async fn auth_believes_x_real_ip_from_trusted_peers_only() {
    let trusted = SocketAddr::from(([10, 1, 2, 3], 5555));
    let untrusted = SocketAddr::from(([192, 0, 2, 10], 5555));
    assert_eq!(
        auth_peer_seen(trusted, "198.51.100.20").await,
        ("198.51.100.20".parse::<IpAddr>().unwrap(), false)
    );
    assert_eq!(
        auth_peer_seen(untrusted, "198.51.100.20").await,
        (untrusted.ip(), false)
    );
    // Garbage from a trusted peer names no client: an unattributed caller of that peer (the
    // engine never strikes it), never the peer itself and never a panic.
    for junk in ["not-an-ip", "unknown", ""] {
        assert_eq!(
            auth_peer_seen(trusted, junk).await,
            (trusted.ip(), true),
            "{junk:?}"
        );
    }
    // IPv4-mapped IPv6 peers match IPv4 ranges.
    let mapped = SocketAddr::new("::ffff:10.9.9.9".parse().unwrap(), 1);
    assert_eq!(
        auth_peer_seen(mapped, "2001:db8::5").await,
        ("2001:db8::5".parse::<IpAddr>().unwrap(), false)
    );
}

#[tokio::test]
async fn reject_reasons_render_through_the_api() {
    // Scripted per reason; the engine-driven version with real windows is in http_engine.rs.
    for reason in [
        Reason::Burst,
        Reason::Hourly,
        Reason::Daily,
        Reason::KeyHourly,
        Reason::Locked,
    ] {
        let decider = scripted(move |_r: &RequestView<'_>| reject(Tier::Session, reason, 77, "x"));
        let d = start(settings(None, ""), decider).await;
        let (parts, bytes) = get(&d.api_url("/v1/auth"), &[("x-original-uri", "/")]).await;
        assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
        let v = json(&bytes);
        assert_eq!(v["reason"], reason.as_str());
        assert_eq!(v["retryAfter"], 77);
        assert_eq!(v["tier"], "session");
        assert!(v["upgrade"].as_str().unwrap().contains("/account"));
        assert_eq!(header(&parts, "x-ratelimit-remaining"), "0");
        assert_eq!(header(&parts, "x-ratelimit-reset"), "77");
    }
}

/// Sends `req` on `s` and reads one answer: its status line, its fields but `date` (sorted),
/// its body.
async fn exchange(s: &mut tokio::net::TcpStream, req: &str) -> (String, Vec<String>, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    loop {
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut fields);
        if let httparse::Status::Complete(len) = resp.parse(&buf).unwrap() {
            let body_len: usize = resp
                .headers
                .iter()
                .find(|f| f.name.eq_ignore_ascii_case("content-length"))
                .map_or(0, |f| {
                    std::str::from_utf8(f.value).unwrap().parse().unwrap()
                });
            if buf.len() >= len + body_len {
                let line = format!("{} {}", resp.code.unwrap(), resp.reason.unwrap());
                let mut heads: Vec<String> = resp
                    .headers
                    .iter()
                    .filter(|f| !f.name.eq_ignore_ascii_case("date"))
                    .map(|f| format!("{}: {}", f.name, String::from_utf8_lossy(f.value)))
                    .collect();
                heads.sort();
                let body = buf[len..len + body_len].to_vec();
                return (line, heads, body);
            }
        }
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before a whole answer to {req:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Forward auth is served by the API listener's own loop (a bodyless HTTP/1.1 request) or, for
/// the same request with `Content-Length: 0`, by hyper and the router: every convention and
/// every answer (allow, reject, 400, 431) is the same on the wire, on one kept-alive
/// connection each, and a `POST /v1/decide` in between is handed over and answered.
#[tokio::test]
async fn auth_answers_alike_on_the_own_loop_and_the_router() {
    let d = start(settings(None, ""), by_header()).await;
    let many: String = (0..80).map(|i| format!("x-h{i}: v\r\n")).collect();
    let requests = [
        "GET /v1/auth HTTP/1.1\r\nhost: a\r\nx-original-uri: /page?x=1\r\nx-real-ip: 192.0.2.44\r\n".to_string(),
        "GET /v1/auth HTTP/1.1\r\nhost: a\r\nx-original-uri: /page\r\nx-test-who: burst\r\n".to_string(),
        "GET /v1/auth?q HTTP/1.1\r\nhost: a\r\nx-forwarded-uri: /c?d\r\nx-forwarded-method: PUT\r\n\
         x-forwarded-host: site\r\nx-forwarded-for: 203.0.113.9\r\n".to_string(),
        "DELETE /v1/auth/envoy/a/b HTTP/1.1\r\nhost: a\r\nx-forwarded-for: 203.0.113.9\r\n".to_string(),
        "GET /v1/auth/envoy HTTP/1.1\r\nhost: a\r\n".to_string(),
        "GET /v1/auth HTTP/1.1\r\nhost: a\r\n".to_string(),
        "GET /v1/auth HTTP/1.1\r\nhost: a\r\nx-original-uri: /a/../b\r\n".to_string(),
        format!("GET /v1/auth HTTP/1.1\r\nhost: a\r\nx-original-uri: /p\r\n{many}"),
        "GET /v1/auth HTTP/1.1\r\nhost: a\r\nx-original-uri: /p\r\nconnection: close\r\n".to_string(),
    ];
    let decide = r#"{"ip":"203.0.113.5","path":"/"}"#;
    let decide = format!(
        "POST /v1/decide HTTP/1.1\r\nhost: a\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{decide}",
        decide.len()
    );
    let mut own = tokio::net::TcpStream::connect(d.api).await.unwrap();
    let mut routed = tokio::net::TcpStream::connect(d.api).await.unwrap();
    for req in &requests {
        let a = exchange(&mut own, &format!("{req}\r\n")).await;
        // One field fewer for the one it adds, so the 431 counts alike.
        let req_b = req.replace("x-h79: v\r\n", "");
        let b = exchange(&mut routed, &format!("{req_b}content-length: 0\r\n\r\n")).await;
        assert_eq!(a, b, "{req:?}");
    }
    let statuses = [
        "204", "429", "204", "200", "200", "400", "400", "431", "204",
    ];
    let mut last = tokio::net::TcpStream::connect(d.api).await.unwrap();
    for (i, (req, status)) in requests.iter().zip(statuses).enumerate() {
        let (line, heads, _) = exchange(&mut last, &format!("{req}\r\n")).await;
        assert!(line.starts_with(status), "{req:?}: {line} {heads:?}");
        if i == 3 {
            let (line, _, body) = exchange(&mut last, &decide).await;
            assert_eq!(line, "200 OK", "{}", String::from_utf8_lossy(&body));
        }
    }
}
