//! The real `limiter-daemon` binary, started from outside with a config file and driven over
//! sockets, on both proxy paths (the own HTTP/1.1 loop and hyper's, `own_loop = false`):
//! shadow mode (`[engine] shadow = true`) admits everything and says what would have happened
//! (proxy header, `/v1/decide`'s `shadow`, metrics labelled `shadow="true"`); enforcing, a
//! forged cookie is delayed at `L_anon + 1`, and a `locked` 429 says what every 429 says.

mod daemon_support;
mod http_support;

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};

use daemon_support::{free_addr, Daemon};
use http::{Method, Request, StatusCode};
use http_support::{body, get, header, json, send, start_upstream, wait_until};
use serde_json::Value;

struct Addrs {
    api: SocketAddr,
    proxy: SocketAddr,
    metrics: SocketAddr,
}

/// Starts the binary on `extra` plus the listeners, the upstream and the state directory.
async fn daemon(dir: &Path, upstream: SocketAddr, own_loop: bool, extra: &str) -> (Daemon, Addrs) {
    let a = Addrs {
        api: free_addr(),
        proxy: free_addr(),
        metrics: free_addr(),
    };
    let config = dir.join("limiter.toml");
    std::fs::write(
        &config,
        format!(
            "{extra}\n[kernel]\nmode = \"off\"\n[store]\nstate_dir = \"{state}\"\n\
             [admin]\nlisten = \"\"\n[http]\napi_listen = [\"{api}\"]\nproxy_listen = [\"{proxy}\"]\n\
             upstream = \"http://{upstream}\"\nown_loop = {own_loop}\n\
             [metrics]\nlisten = \"{metrics}\"\n",
            state = dir.join("state").display(),
            api = a.api,
            proxy = a.proxy,
            metrics = a.metrics,
        ),
    )
    .unwrap();
    let d = Daemon(
        Command::new(env!("CARGO_BIN_EXE_limiter-daemon"))
            .args(["run", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start limiter-daemon"),
    );
    for addr in [a.api, a.proxy, a.metrics] {
        wait_until("the daemon listens", || TcpStream::connect(addr).is_ok()).await;
    }
    (d, a)
}

async fn decide(api: SocketAddr, ip: &str, path: &str, headers: Value) -> Value {
    let req = Request::builder()
        .method(Method::POST)
        .uri(format!("http://{api}/v1/decide"))
        .header("content-type", "application/json")
        .body(body(
            serde_json::json!({ "ip": ip, "method": "GET", "path": path, "headers": headers })
                .to_string(),
        ))
        .unwrap();
    let (parts, bytes) = send(req).await;
    assert_eq!(parts.status, StatusCode::OK);
    json(&bytes)
}

async fn scrape(metrics: SocketAddr) -> String {
    let (_, bytes) = get(&format!("http://{metrics}/metrics"), &[]).await;
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn series(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no series {name} in:\n{text}"))
}

async fn shadow_mode_admits_and_labels(own_loop: bool) {
    let up = start_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (_d, a) = daemon(
        dir.path(),
        up.addr,
        own_loop,
        "[engine]\nshadow = true\n[tiers.anon]\nburst = 3\n",
    )
    .await;

    // Through the proxy: all five reach the upstream; the 4th and 5th say "would be a burst".
    let mut said = Vec::new();
    for _ in 0..5 {
        let (parts, bytes) = get(&format!("http://{}/", a.proxy), &[]).await;
        assert_eq!((parts.status, &bytes[..]), (StatusCode::OK, &b"ok"[..]));
        said.push(header(&parts, "x-ratelimit-shadow").to_string());
    }
    assert_eq!(
        said,
        [
            "allow; reason=none",
            "allow; reason=none",
            "allow; reason=none",
            "reject; reason=burst",
            "reject; reason=burst"
        ]
    );

    // The decision API: an allow, and what enforcing would have done.
    for _ in 0..3 {
        decide(a.api, "203.0.113.9", "/", Value::Null).await;
    }
    let v = decide(a.api, "203.0.113.9", "/", Value::Null).await;
    assert_eq!(v["action"], "allow", "{v}");
    assert_eq!(v["delayMs"], 0, "{v}");
    assert_eq!(
        v["shadow"],
        serde_json::json!({ "action": "reject", "reason": "burst", "delayMs": 0 }),
        "{v}"
    );
    assert_eq!(v["headers"]["x-ratelimit-shadow"], "reject; reason=burst");

    // Counted with shadow="true"; the strikes that would have been made, none made.
    let t = scrape(a.metrics).await;
    let rejected =
        r#"limiter_decisions_total{tier="anon",action="reject",reason="burst",shadow="true"}"#;
    assert_eq!(series(&t, rejected), 3.0);
    let allowed =
        r#"limiter_decisions_total{tier="anon",action="allow",reason="none",shadow="true"}"#;
    assert_eq!(series(&t, allowed), 6.0);
    assert_eq!(series(&t, "limiter_shadow_strikes_total"), 3.0);
    assert_eq!(series(&t, "limiter_strikes_total"), 0.0);
    assert_eq!(
        up.state.requests.load(std::sync::atomic::Ordering::SeqCst),
        5
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_through_the_real_daemon_own_loop() {
    shadow_mode_admits_and_labels(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_through_the_real_daemon_hyper_path() {
    shadow_mode_admits_and_labels(false).await;
}

async fn every_429_says_the_same_things(own_loop: bool) {
    let up = start_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let (_d, a) = daemon(
        dir.path(),
        up.addr,
        own_loop,
        "[tiers.anon]\nburst = 3\n[tiers.session]\nmultiplier = 4\n[quota]\nanon = 2\n\
         [[routes]]\nprefix = \"/scan\"\nlimits = [\"daily\"]\nover_quota = \"delay\"\n\
         [default_route]\nlimits = [\"burst\", \"hourly\"]\n",
    )
    .await;

    // A forged cookie buys no scan quota: delayed at L_anon + 1.
    let cookie = serde_json::json!({ "cookie": "session=forged" });
    for _ in 0..2 {
        let v = decide(a.api, "203.0.113.20", "/scan", cookie.clone()).await;
        assert_eq!(
            (&v["action"], &v["tier"]),
            (&Value::from("allow"), &Value::from("session"))
        );
    }
    let v = decide(a.api, "203.0.113.20", "/scan", cookie).await;
    assert_eq!(
        (&v["action"], &v["delayMs"]),
        (&Value::from("delay"), &Value::from(5000)),
        "{v}"
    );

    // Through the proxy: three served, a burst 429, then a locked 429 with the same members.
    for n in 0..3 {
        let (parts, bytes) = get(&format!("http://{}/", a.proxy), &[]).await;
        assert_eq!(parts.status, StatusCode::OK, "request {n}: {bytes:?}");
    }
    let (parts, bytes) = get(&format!("http://{}/", a.proxy), &[]).await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    let burst = json(&bytes);
    assert_eq!(burst["reason"], "burst");
    let (parts, bytes) = get(&format!("http://{}/", a.proxy), &[]).await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    let locked = json(&bytes);
    assert_eq!(locked["reason"], "locked", "{locked}");
    assert_eq!(locked["hourlyLimit"], 600, "{locked}");
    assert_eq!(locked["hourlyLimit"], burst["hourlyLimit"]);
    assert_eq!(header(&parts, "x-ratelimit-limit-hour"), "600");
    assert_eq!(header(&parts, "x-ratelimit-tier"), "anon");
    let upgrade = locked["upgrade"].as_str().unwrap();
    assert!(upgrade.contains("4x the anonymous budget"), "{upgrade}");

    // /v1/auth (the client is the peer, 127.0.0.1, locked above) says the same.
    let (parts, _) = get(
        &format!("http://{}/v1/auth", a.api),
        &[("x-original-uri", "/")],
    )
    .await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&parts, "x-ratelimit-limit-hour"), "600");

    // /v1/decide for a locked caller: the problem document and the headers.
    for _ in 0..4 {
        decide(a.api, "203.0.113.21", "/", Value::Null).await;
    }
    let v = decide(a.api, "203.0.113.21", "/", Value::Null).await;
    assert_eq!(v["reason"], "locked", "{v}");
    assert_eq!(v["problem"]["hourlyLimit"], 600, "{v}");
    assert_eq!(v["headers"]["x-ratelimit-limit-hour"], "600", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_429_says_the_same_things_own_loop() {
    every_429_says_the_same_things(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_429_says_the_same_things_hyper_path() {
    every_429_says_the_same_things(false).await;
}
