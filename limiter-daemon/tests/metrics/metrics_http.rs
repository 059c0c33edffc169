//! Metrics and health endpoints on a real operator listener, fed by the real engine (embedded
//! store or a real valkey-server, manual clock) behind the real HTTP surfaces: decisions by
//! tier/action/reason, soft/hard hits, the delay histogram, strikes and lockouts, held and
//! refused requests, the namespace, `/healthz` and `/readyz`.

use crate::http_support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use http::StatusCode;
use http_support::*;
use limiter_daemon::clock::ManualClock;
use limiter_daemon::config::{Config, EnvMap};
use limiter_daemon::edge::render::response::Hints;
use limiter_daemon::engine::sink::NoKernel;
use limiter_daemon::engine::Engine;
use limiter_daemon::metrics::server::MetricsServer;
use limiter_daemon::metrics::{KernelSource, MeteredDecider, Metrics};
use limiter_daemon::proxy::server::HttpServer;

/// 2026-11-29T10:00:30Z.
const T0: u64 = 1_795_946_430_000;

/// Anonymous burst 4; daily quota 2 on `/scan` in delay mode, soft window 1 (the 3rd request
/// is a soft hit, the 4th a hard one); the default route meters burst and hourly only.
const CONFIG: &str = r#"
[tiers.anon]
burst = 4
hourly = 1000
[quota]
anon = 2
soft_window = 1
soft_delay_ms = 5000
hard_delay_ms = 60000
[default_route]
limits = ["burst", "hourly"]
[[routes]]
prefix = "/scan"
over_quota = "delay"
[lockout]
base = "60s"
"#;

struct World {
    engine: Arc<Engine>,
    /// Held so time stays where the test put it.
    _clock: ManualClock,
    metrics: Arc<Metrics>,
    metrics_addr: SocketAddr,
    d: Surfaces,
    _up: TestUpstream,
    _state: tempfile::TempDir,
}

/// The bound HTTP surfaces (served until the test ends).
struct Surfaces {
    proxy: Option<SocketAddr>,
    api: SocketAddr,
    gate: Arc<limiter_daemon::edge::steps::hold::HoldGate>,
    _task: tokio::task::JoinHandle<()>,
}

impl Surfaces {
    fn proxy_url(&self, path: &str) -> String {
        format!("http://{}{}", self.proxy.expect("proxy listener"), path)
    }
    fn api_url(&self, path: &str) -> String {
        format!("http://{}{}", self.api, path)
    }
}

fn config(text: &str, state: &Path) -> Config {
    let text = format!("{text}\n[store]\nstate_dir = \"{}\"\n", state.display());
    Config::from_toml_str(&text, Path::new("test.toml"), &EnvMap::new()).unwrap()
}

/// The real engine behind the real surfaces, decisions metered, metrics on 127.0.0.1:0.
async fn world_with(
    engine: Arc<Engine>,
    clock: ManualClock,
    state: tempfile::TempDir,
    namespace: &str,
    http_extra: &str,
) -> World {
    let metrics = Metrics::new(namespace);
    metrics.attach_engine(Arc::clone(&engine));
    metrics.attach_kernel(KernelSource {
        mode: engine.config().kernel.mode,
        attached: None,
    });
    let up = start_upstream().await;
    let settings = settings(Some(up.addr), http_extra);
    let decider = Arc::new(MeteredDecider::new(engine.clone(), Arc::clone(&metrics)));
    let server = HttpServer::bind(&settings, Hints::from_settings(&settings), decider)
        .await
        .unwrap();
    metrics.attach_http(&server);
    let proxy = server.proxy_addrs().unwrap().first().copied();
    let api = server.api_addrs().unwrap()[0];
    let gate = server.hold_gate();
    let ms = MetricsServer::bind("127.0.0.1:0".parse().unwrap(), Arc::clone(&metrics))
        .await
        .unwrap();
    let metrics_addr = ms.local_addr().unwrap();
    tokio::spawn(ms.run(std::future::pending()));
    let task = tokio::spawn(async move {
        server.run(std::future::pending()).await.unwrap();
    });
    World {
        engine,
        _clock: clock,
        metrics,
        metrics_addr,
        d: Surfaces {
            proxy,
            api,
            gate,
            _task: task,
        },
        _up: up,
        _state: state,
    }
}

async fn world(namespace: &str, http_extra: &str) -> World {
    let state = tempfile::tempdir().unwrap();
    let cfg = config(CONFIG, state.path());
    let clock = ManualClock::new(T0);
    let engine = manual_engine(cfg, &clock, T0);
    world_with(engine, clock, state, namespace, http_extra).await
}

impl World {
    async fn scrape(&self) -> String {
        let (parts, body) = get(&format!("http://{}/metrics", self.metrics_addr), &[]).await;
        assert_eq!(parts.status, StatusCode::OK);
        assert!(
            header(&parts, "content-type").starts_with("application/openmetrics-text"),
            "{:?}",
            parts.headers
        );
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(text.ends_with("# EOF\n"), "{text}");
        text
    }

    /// `POST /v1/decide` for `ip` and `path`: the decision's action.
    async fn decide(&self, ip: &str, path: &str) -> String {
        let (parts, body) = send(
            http::Request::post(self.d.api_url("/v1/decide"))
                .header("content-type", "application/json")
                .body(http_support::body(format!(
                    r#"{{"ip":"{ip}","path":"{path}"}}"#
                )))
                .unwrap(),
        )
        .await;
        assert_eq!(parts.status, StatusCode::OK);
        json(&body)["action"].as_str().unwrap().to_string()
    }
}

/// The value of the series `series` (name and labels exactly as rendered).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn must(text: &str, series: &str) -> f64 {
    value(text, series).unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_hits_histogram_strikes_and_lockouts_are_scraped() {
    let w = world("limiter", "").await;
    let before = w.scrape().await;
    // Every fixed series exists at 0 before any traffic (alerts on increase() need that).
    assert_eq!(
        must(
            &before,
            r#"limiter_decisions_total{tier="anon",action="reject",reason="burst",shadow="false"}"#
        ),
        0.0
    );
    assert_eq!(must(&before, "limiter_quota_soft_hits_total"), 0.0);
    assert_eq!(must(&before, "limiter_quota_hard_hits_total"), 0.0);
    assert_eq!(must(&before, "limiter_lockouts_active"), 0.0);
    assert_eq!(must(&before, "limiter_kernel_attached"), 0.0);

    // A scanner: two allowed, a soft hit, then a hard hit.
    assert_eq!(w.decide("203.0.113.7", "/scan/a").await, "allow");
    assert_eq!(w.decide("203.0.113.7", "/scan/a").await, "allow");
    assert_eq!(w.decide("203.0.113.7", "/scan/a").await, "delay");
    assert_eq!(w.decide("203.0.113.7", "/scan/a").await, "delay");
    // A burster, through the reverse proxy this time: four served, a burst 429 (strike, level
    // 1 lockout), then locked.
    for _ in 0..4 {
        let (parts, _) = get(&w.d.proxy_url("/"), &[]).await;
        assert_eq!(parts.status, StatusCode::OK);
    }
    let (parts, _) = get(&w.d.proxy_url("/"), &[]).await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    let (parts, _) = get(&w.d.proxy_url("/"), &[]).await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);

    let t = w.scrape().await;
    let dec = |action: &str, reason: &str| {
        must(
            &t,
            &format!(
                r#"limiter_decisions_total{{tier="anon",action="{action}",reason="{reason}",shadow="false"}}"#
            ),
        )
    };
    assert_eq!(dec("allow", "none"), 6.0);
    assert_eq!(dec("delay", "none"), 2.0);
    assert_eq!(dec("reject", "burst"), 1.0);
    assert_eq!(dec("reject", "locked"), 1.0);
    assert_eq!(dec("reject", "hourly"), 0.0);
    assert_eq!(must(&t, "limiter_quota_soft_hits_total"), 1.0);
    assert_eq!(must(&t, "limiter_quota_hard_hits_total"), 1.0);
    // Histogram: 10 requests, 8 not delayed, the soft (5 s) and the hard (60 s) one.
    assert_eq!(must(&t, "limiter_request_delay_seconds_count"), 10.0);
    assert_eq!(must(&t, "limiter_request_delay_seconds_sum"), 65.0);
    // (bucket bound, requests held at most that long: cumulative)
    for (le, count) in [
        ("0.001", 8.0),
        ("2.5", 8.0),
        ("5.0", 9.0),
        ("30.0", 9.0),
        ("60.0", 10.0),
    ] {
        let series = format!(r#"limiter_request_delay_seconds_bucket{{le="{le}"}}"#);
        assert_eq!(must(&t, &series), count, "{series}");
    }
    assert_eq!(must(&t, "limiter_decision_duration_seconds_count"), 10.0);
    assert_eq!(must(&t, "limiter_strikes_total"), 1.0);
    assert_eq!(must(&t, r#"limiter_lockouts_total{level="1"}"#), 1.0);
    assert_eq!(must(&t, "limiter_lockouts_active"), 1.0);
    assert_eq!(must(&t, "limiter_store_degraded"), 0.0);
    assert_eq!(must(&t, "limiter_store_errors_total"), 0.0);
    assert_eq!(must(&t, "limiter_held_refused_total"), 0.0);
    // The scrape and the engine agree on the lockout.
    assert_eq!(w.engine.lockouts().list().unwrap().len(), 1);
    // Rendering straight from the registry gives the same text as the listener.
    assert!(w.metrics.render().contains("limiter_strikes_total 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_stella_reproduces_the_quota_doc_names() {
    let w = world("stella", "").await;
    for _ in 0..3 {
        w.decide("203.0.113.8", "/scan/x").await;
    }
    let t = w.scrape().await;
    assert_eq!(must(&t, "stella_quota_soft_hits_total"), 1.0);
    assert_eq!(must(&t, "stella_quota_hard_hits_total"), 0.0);
    assert_eq!(must(&t, "stella_request_delay_seconds_count"), 3.0);
    assert!(
        !t.lines().any(|l| l.starts_with("limiter_")),
        "no series keeps the default namespace:\n{t}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_and_refused_requests_are_counted() {
    let w = world("limiter", "max_held_per_identity = 1\n").await;
    let url = w.d.proxy_url("/scan/range");
    for _ in 0..2 {
        let (parts, _) = get(&url, &[]).await;
        assert_eq!(parts.status, StatusCode::OK);
    }
    // Over quota: held for the soft delay (5 s of real time; the test never waits for it).
    let held = {
        let url = url.clone();
        tokio::spawn(async move { get(&url, &[]).await })
    };
    wait_until("one held request", || w.d.gate.held() == 1).await;
    let (parts, _) = get(&url, &[]).await;
    assert_eq!(parts.status, StatusCode::SERVICE_UNAVAILABLE);
    let t = w.scrape().await;
    assert_eq!(must(&t, "limiter_held_requests"), 1.0);
    assert_eq!(must(&t, "limiter_held_admitted_total"), 1.0);
    assert_eq!(must(&t, "limiter_held_refused_total"), 1.0);
    assert_eq!(
        must(&t, r#"limiter_upstream_errors_total{kind="unreachable"}"#),
        0.0
    );
    held.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_readyz_when_ready() {
    let w = world("limiter", "").await;
    let (parts, body) = get(&format!("http://{}/healthz", w.metrics_addr), &[]).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(body, "ok\n");
    let (parts, body) = get(&format!("http://{}/readyz", w.metrics_addr), &[]).await;
    assert_eq!(parts.status, StatusCode::OK);
    let v = json(&body);
    assert_eq!(v["ready"], true);
    assert_eq!(v["reasons"], serde_json::json!([]));
    let (parts, _) = get(&format!("http://{}/nope", w.metrics_addr), &[]).await;
    assert_eq!(parts.status, StatusCode::NOT_FOUND);
}

// ---------------------------------------------------------------------------------------------
// A real valkey-server (`limiter_tests::valkey`), stopped mid-test, for the degraded store.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_naming_the_store_while_it_is_degraded() {
    let Some(valkey) = limiter_tests::valkey::start() else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let text = format!(
        "{CONFIG}\n[store]\nbackend = \"valkey\"\nvalkey_address = \"{}\"\nstate_dir = \"{}\"\n",
        valkey.addr,
        state.path().display()
    );
    let cfg = Config::from_toml_str(&text, Path::new("test.toml"), &EnvMap::new()).unwrap();
    let clock = ManualClock::new(T0);
    let engine =
        Arc::new(Engine::open(Arc::new(cfg), Arc::new(NoKernel), Arc::new(clock.clone())).unwrap());
    let w = world_with(engine, clock, state, "limiter", "").await;
    let readyz = format!("http://{}/readyz", w.metrics_addr);
    assert_eq!(w.decide("203.0.113.9", "/").await, "allow");
    let (parts, _) = get(&readyz, &[]).await;
    assert_eq!(
        parts.status,
        StatusCode::OK,
        "ready while the store answers"
    );

    drop(valkey); // the store goes down
    assert_eq!(
        w.decide("203.0.113.9", "/").await,
        "allow",
        "counted locally"
    );
    assert!(w.engine.store().degraded());
    let (parts, body) = get(&readyz, &[]).await;
    assert_eq!(parts.status, StatusCode::SERVICE_UNAVAILABLE);
    let v = json(&body);
    assert_eq!(v["ready"], false);
    assert!(
        v["reasons"][0].as_str().unwrap().contains("store degraded"),
        "{v}"
    );
    let t = w.scrape().await;
    assert_eq!(must(&t, "limiter_store_degraded"), 1.0);
    assert!(must(&t, "limiter_store_errors_total") >= 1.0);
    // /healthz stays 200: the process serves, it is just not fully ready.
    let (parts, _) = get(&format!("http://{}/healthz", w.metrics_addr), &[]).await;
    assert_eq!(parts.status, StatusCode::OK);
}

/// A client's malformed chunked body is the client's mistake: 400, counted apart, and never an
/// upstream failure (else any client could fake upstream alerts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_bad_chunked_body_is_a_400_and_not_an_upstream_failure() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let w = world("limiter", "").await;
    let mut s = tokio::net::TcpStream::connect(w.d.proxy.unwrap())
        .await
        .unwrap();
    s.write_all(
        b"POST /upload HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n\
          5\r\nhello\r\nZZ\r\nnot a chunk\r\n0\r\n\r\n",
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut got))
        .await
        .expect("the proxy answers and closes")
        .unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
    assert!(text.contains("application/problem+json"), "{text}");
    assert!(text.contains("request body"), "{text}");
    let t = w.scrape().await;
    assert_eq!(must(&t, "limiter_client_body_errors_total"), 1.0);
    assert_eq!(
        must(&t, r#"limiter_upstream_errors_total{kind="failed"}"#),
        0.0
    );
}
