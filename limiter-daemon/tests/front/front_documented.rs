//! Traefik's `forwardAuth` and Envoy's HTTP ext_authz, which Debian does not package: their
//! documented auth requests reproduced exactly (method, path, fields) against the daemon's
//! `/v1/auth` with the real engine, at the address and prefix the shipped
//! `examples/traefik/dynamic.yml` and `examples/envoy/envoy.yaml` name. Two clients are metered
//! apart, the burst's 429 is the daemon's, a route rule applies by the original path, Envoy gets
//! the 200 it insists on, and a request in no convention gets a 400 listing every one's fields.
//!
//! - Traefik (`pkg/middlewares/auth/forward.go`): `GET` to `address`, the original request's
//!   fields copied, with `X-Forwarded-Method`, `-Proto`, `-Host`, `-Uri` and `-For` written by
//!   Traefik.
//! - Envoy (`ext_authz` `http_service`): the original method, `path_prefix` + the original
//!   path and query, `Content-Length: 0`, the original `:authority` as Host, the
//!   `allowed_headers` (`x-forwarded-for` with the client appended), and Envoy's own
//!   `x-envoy-expected-rq-timeout-ms`.

use crate::rig::{ip, request, world};
use limiter_tests::client::Resp;

fn example(path: &str) -> String {
    std::fs::read_to_string(limiter_tests::workspace_root().join(path)).unwrap()
}

/// The value after `key` on its line of `text`, unquoted.
fn field(text: &str, key: &str) -> String {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(key))
        .unwrap_or_else(|| panic!("{key} missing"));
    line.trim_start()[key.len()..]
        .trim()
        .trim_matches('"')
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traefik_and_envoy_requests_as_documented() {
    let w = world("").await;
    let api = w.d.api;
    let lo = ip("127.0.0.1");

    // Traefik: forwardAuth's address.
    let address = field(&example("examples/traefik/dynamic.yml"), "address:");
    let auth_path = address
        .strip_prefix("http://127.0.0.1:8081")
        .expect("traefik address on the documented API port");
    assert_eq!(auth_path, "/v1/auth");
    let traefik = |client: &'static str, method: &'static str, uri: &'static str| async move {
        request(
            lo,
            api,
            "GET",
            "/v1/auth",
            &[
                ("host", "127.0.0.1:8081"),
                ("user-agent", "curl/7.88.1"),
                ("accept", "*/*"),
                ("x-forwarded-host", "app.test"),
                ("x-forwarded-method", method),
                ("x-forwarded-proto", "http"),
                ("x-forwarded-uri", uri),
                ("x-forwarded-for", client),
                ("x-real-ip", "198.51.100.1"),
                ("accept-encoding", "gzip"),
            ],
        )
        .await
    };
    for (uri, left) in [
        ("/page?x=1", "2"),
        ("/free/x", ""),
        ("/page", "1"),
        ("/page", "0"),
    ] {
        let r = traefik("203.0.113.20", "POST", uri).await;
        assert_eq!(r.status, 204, "{uri}: {}", r.body);
        // `/free` (route by X-Forwarded-Uri) is not metered and counts nothing.
        if !left.is_empty() {
            assert_eq!(r.field("x-ratelimit-remaining"), left);
            assert!(r.header("ratelimit").is_some());
        }
    }
    assert_429(&traefik("203.0.113.20", "GET", "/page").await);
    // The caller's own X-Real-IP is not Traefik's field: the same for every client, ignored.
    let r = traefik("203.0.113.21", "GET", "/page").await;
    assert_eq!((r.status, r.field("x-ratelimit-remaining")), (204, "2"));

    // Envoy: path_prefix, 200 only.
    let prefix = field(&example("examples/envoy/envoy.yaml"), "path_prefix:");
    assert_eq!(prefix, "/v1/auth/envoy");
    let envoy = |client: &'static str, method: &'static str, path: &'static str| {
        let target = format!("{prefix}{path}");
        async move {
            request(
                lo,
                api,
                method,
                &target,
                &[
                    ("host", "app.test"),
                    ("content-length", "0"),
                    ("x-forwarded-for", client),
                    ("x-envoy-expected-rq-timeout-ms", "65000"),
                    ("x-real-ip", "198.51.100.1"),
                ],
            )
            .await
        }
    };
    for (path, left) in [
        ("/reports?x=1", "2"),
        ("/free", ""),
        ("/reports", "1"),
        ("/r", "0"),
    ] {
        let r = envoy("203.0.113.30", "POST", path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        // `/free` (route by Envoy's path) is not metered and counts nothing.
        if !left.is_empty() {
            assert_eq!(r.field("x-ratelimit-remaining"), left);
            assert!(r.header("ratelimit-policy").is_some());
        }
    }
    assert_429(&envoy("203.0.113.30", "DELETE", "/reports").await);
    // X-Forwarded-For is walked from the right past trusted peers (127.0.0.1) to the client.
    let r = envoy("203.0.113.31, 127.0.0.1", "GET", "/reports").await;
    assert_eq!((r.status, r.field("x-ratelimit-remaining")), (200, "2"));

    // No convention: 400 naming every front end's fields.
    let r = request(lo, api, "GET", "/v1/auth", &[]).await;
    assert_eq!(r.status, 400);
    let detail = r.json()["detail"].as_str().unwrap().to_string();
    for f in [
        "X-Original-URI",
        "X-Forwarded-Uri",
        "X-Forwarded-Method",
        "X-Forwarded-For",
        "/v1/auth/envoy",
    ] {
        assert!(detail.contains(f), "{f} in {detail}");
    }
}

fn assert_429(r: &Resp) {
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.field("content-type"), "application/problem+json");
    assert!(r.field("retry-after").parse::<u64>().unwrap() > 0);
    assert_eq!(r.field("x-ratelimit-remaining"), "0");
    let v = r.json();
    assert_eq!(
        (v["status"].as_u64(), v["reason"].as_str()),
        (Some(429), Some("burst"))
    );
}

/// Seconds in a timeout as the example writes it (`120s`, `2m`).
fn seconds(value: &str) -> u64 {
    let v = value.trim().trim_end_matches(';');
    if let Some(m) = v.strip_suffix('m') {
        return m.parse::<u64>().unwrap() * 60;
    }
    v.trim_end_matches('s')
        .parse()
        .unwrap_or_else(|_| panic!("not a timeout: {value:?}"))
}

/// Every value after `key` in `text` (one per line it starts), in seconds.
fn timeouts(text: &str, key: &str) -> Vec<u64> {
    text.lines()
        .map(str::trim_start)
        .filter_map(|l| l.strip_prefix(key))
        .map(|rest| seconds(rest.split_whitespace().next().unwrap_or("")))
        .collect()
}

/// The daemon holds a scan-delayed request up to `hard_delay_ms` before it answers (forward
/// auth) or forwards it (proxy). A front end whose read timeout is not above that, with room
/// for the app's own time, turns every hard-delayed request into its own 504 or 500 (nginx's
/// default `proxy_read_timeout` is 60 s, the hard delay's default too): every shipped front end
/// waits at least `hard_delay_ms` + 30 s, and the Traefik example, whose forwardAuth timeout
/// is fixed at 30 s, says what to do instead.
#[test]
fn every_shipped_front_end_waits_longer_than_the_hard_delay() {
    let limiter = example("examples/limiter.toml");
    let hard_ms: u64 = field(&limiter, "hard_delay_ms =")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let least = hard_ms / 1000 + 30;
    let check = |file: &str, key: &str, want: usize| {
        let found = timeouts(&example(file), key);
        assert!(
            found.len() >= want,
            "{file}: expected {want} `{key}` lines, found {found:?}"
        );
        for t in found {
            assert!(
                t >= least,
                "{file}: `{key} {t}s` is not above the hard delay ({hard_ms} ms) + 30 s"
            );
        }
    };
    check("examples/nginx/limiter-auth.conf", "proxy_read_timeout", 1);
    check("examples/nginx/limiter-proxy.conf", "proxy_read_timeout", 1);
    check("examples/haproxy/haproxy.cfg", "timeout server", 1);
    check("examples/haproxy/haproxy.cfg", "timeout client", 1);
    check("examples/envoy/envoy.yaml", "timeout:", 3);
    check("examples/caddy/Caddyfile", "response_header_timeout", 1);
    let traefik = example("examples/traefik/dynamic.yml");
    assert!(
        traefik.contains("after 30 s") && traefik.contains("at most 25000"),
        "the Traefik example says its forwardAuth gives up at 30 s and what to set instead"
    );
}

/// Every `systemctl` line in the README and the docs (certbot's deploy hook, reload, enable)
/// names the unit the package ships, `limiter.service`, and no other.
#[test]
fn every_documented_systemctl_line_names_the_shipped_unit() {
    let root = limiter_tests::workspace_root();
    let unit = std::fs::read_dir(root.join("packaging"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .find(|n| n.ends_with(".service"))
        .expect("a unit in packaging/");
    let unit = unit.trim_end_matches(".service").to_string();
    let mut files = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    let mut seen = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let mut rest = line;
            while let Some(at) = rest.find("systemctl ") {
                rest = &rest[at + "systemctl ".len()..];
                let mut words = rest.split_whitespace();
                let verb = words.next().unwrap_or("");
                if !["reload", "restart", "enable", "start", "stop", "status"].contains(&verb) {
                    continue;
                }
                let mut name = words.next().unwrap_or("");
                if name == "--now" {
                    name = words.next().unwrap_or("");
                }
                let name =
                    name.trim_matches(|c: char| !c.is_alphanumeric() && c != '-' && c != '.');
                assert_eq!(
                    name.trim_end_matches(".service"),
                    unit,
                    "{}:{}: `systemctl {verb} {name}` names no shipped unit",
                    f.display(),
                    i + 1
                );
                seen += 1;
            }
        }
    }
    assert!(seen >= 2, "the README's install lines are found");
}
