//! What the in-process HTTP tests share (the `http`, `front`, `metrics` and `daemon` areas
//! include it by path; it needs the daemon's types, so it is not in `limiter-tests`): a real
//! upstream server on 127.0.0.1:0, a scripted decider for the mechanics tests, the daemon's
//! HTTP server started in-process, and a hyper client.

#![allow(
    dead_code,
    reason = "each test file uses a different part of this support module"
)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use limiter_daemon::config::http::HttpSettings;
use limiter_daemon::edge::render::response::Hints;
use limiter_daemon::edge::steps::hold::HoldGate;
use limiter_daemon::engine::decider::{Decider, RequestView};
use limiter_daemon::model::{Decision, DelayKind, Reason, Tier, WindowKind, WindowState};
use limiter_daemon::proxy::server::HttpServer;
use limiter_daemon::proxy::upstream::error::UpstreamCounters;
use tokio::sync::{oneshot, Notify};

pub type ClientBody = BoxBody<Bytes, std::io::Error>;

// ---------------------------------------------------------------------------------------------
// Checksums: a word-wise 64-bit hash, fast enough in debug builds for 64 MiB.

#[derive(Default, Clone)]
pub struct Checksum {
    h: u64,
    len: u64,
    carry: Vec<u8>,
}

impl Checksum {
    pub fn update(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if !self.carry.is_empty() {
            let need = 8 - self.carry.len();
            let take = need.min(data.len());
            self.carry.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.carry.len() == 8 {
                let w = u64::from_le_bytes(self.carry[..].try_into().unwrap());
                self.mix(w);
                self.carry.clear();
            }
        }
        let mut chunks = data.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes(c.try_into().unwrap()));
        }
        self.carry.extend_from_slice(chunks.remainder());
    }
    fn mix(&mut self, w: u64) {
        self.h = (self.h ^ w).wrapping_mul(0x100_0000_01b3).rotate_left(29);
    }
    pub fn finish(&self) -> (u64, u64) {
        let mut tail = [0u8; 8];
        tail[..self.carry.len()].copy_from_slice(&self.carry);
        let mut c = self.clone();
        c.mix(u64::from_le_bytes(tail) ^ (self.carry.len() as u64) << 56);
        (c.h, self.len)
    }
}

/// Deterministic pseudo-random chunk `i` of `size` bytes.
pub fn chunk(i: u64, size: usize) -> Bytes {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(size);
    while out.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(size);
    Bytes::from(out)
}

pub const CHUNK: usize = 64 * 1024;

// ---------------------------------------------------------------------------------------------
// The upstream: a real hyper server on 127.0.0.1:0.

#[derive(Default)]
pub struct UpstreamState {
    pub connections: AtomicUsize,
    /// Connections open right now, and the most ever open at once.
    pub open: AtomicUsize,
    pub max_open: AtomicUsize,
    pub requests: AtomicUsize,
    /// `/trickle` waits on this between its two chunks.
    pub release: Notify,
    /// `/upload-gated` signals this when its first chunk arrived.
    pub first_chunk_seen: Notify,
}

pub struct TestUpstream {
    pub addr: SocketAddr,
    pub state: Arc<UpstreamState>,
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<ClientBody> {
    let mut r = Response::new(Full::new(body.into()).map_err(|e| match e {}).boxed());
    *r.status_mut() = status;
    r
}

async fn upstream_route(state: Arc<UpstreamState>, req: Request<Incoming>) -> Response<ClientBody> {
    state.requests.fetch_add(1, Ordering::SeqCst);
    let path = req.uri().path().to_string();
    if path == "/headers" {
        let headers: Vec<(String, String)> = req
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = serde_json::json!({
            "method": req.method().as_str(),
            "uri": req.uri().to_string(),
            "version": format!("{:?}", req.version()),
            "headers": headers,
        });
        return text(StatusCode::OK, body.to_string());
    }
    if path == "/upload" || path == "/upload-gated" {
        let gated = path == "/upload-gated";
        let mut body = req.into_body();
        let mut sum = Checksum::default();
        let mut signalled = false;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                return text(StatusCode::BAD_REQUEST, "body broke");
            };
            if let Some(data) = frame.data_ref() {
                sum.update(data);
                if gated && !signalled {
                    signalled = true;
                    state.first_chunk_seen.notify_one();
                }
            }
        }
        let (h, len) = sum.finish();
        return text(
            StatusCode::OK,
            serde_json::json!({"hash": h.to_string(), "len": len}).to_string(),
        );
    }
    if let Some(n) = path.strip_prefix("/download/") {
        let total: u64 = n.parse().unwrap_or(0);
        let chunks = total.div_ceil(CHUNK as u64);
        let stream = futures_util::stream::iter(0..chunks).map(move |i| {
            let size = (total - i * CHUNK as u64).min(CHUNK as u64) as usize;
            Ok::<_, std::io::Error>(Frame::data(chunk(i, size)))
        });
        let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
        r.headers_mut().insert("x-total", total.into());
        return r;
    }
    if path == "/trickle" {
        let st = Arc::clone(&state);
        let stream = futures_util::stream::unfold(0u8, move |step| {
            let st = Arc::clone(&st);
            async move {
                match step {
                    0 => Some((
                        Ok::<_, std::io::Error>(Frame::data(Bytes::from_static(b"first"))),
                        1,
                    )),
                    1 => {
                        st.release.notified().await;
                        Some((Ok(Frame::data(Bytes::from_static(b"second"))), 2))
                    }
                    _ => None,
                }
            }
        });
        return Response::new(BodyExt::boxed(StreamBody::new(stream)));
    }
    if let Some(code) = path.strip_prefix("/status/") {
        let status = code
            .parse::<u16>()
            .ok()
            .and_then(|c| StatusCode::from_u16(c).ok())
            .unwrap_or(StatusCode::OK);
        let mut r = text(status, format!("body of {code}"));
        let h = r.headers_mut();
        h.insert("x-upstream", "yes".parse().unwrap());
        h.append("set-cookie", "a=1; Path=/".parse().unwrap());
        h.append("set-cookie", "b=2; Path=/".parse().unwrap());
        h.insert("content-type", "text/x-test".parse().unwrap());
        h.insert("connection", "x-upstream-hop".parse().unwrap());
        h.insert("x-upstream-hop", "must not pass".parse().unwrap());
        return r;
    }
    if path == "/slow" {
        // An app that takes a moment per request, so exchanges overlap.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if path == "/hang" {
        futures_util::future::pending::<()>().await;
    }
    text(StatusCode::OK, "ok")
}

pub async fn start_upstream() -> TestUpstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = Arc::new(UpstreamState::default());
    let st = Arc::clone(&state);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            st.connections.fetch_add(1, Ordering::SeqCst);
            let now = st.open.fetch_add(1, Ordering::SeqCst) + 1;
            st.max_open.fetch_max(now, Ordering::SeqCst);
            let st = Arc::clone(&st);
            tokio::spawn(async move {
                let svc = {
                    let st = Arc::clone(&st);
                    service_fn(move |req| {
                        let st = Arc::clone(&st);
                        async move { Ok::<_, Infallible>(upstream_route(st, req).await) }
                    })
                };
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
                st.open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    TestUpstream { addr, state }
}

/// A raw upstream answering each request head with the bytes `answer` gives for its request
/// line, then closing if `close_after` says so; counts the connections it accepted.
pub async fn scripted_upstream(
    answer: fn(&str) -> (&'static [u8], bool),
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                loop {
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    let head = String::from_utf8_lossy(&got[..end]).into_owned();
                    got.drain(..end);
                    let line = head.lines().next().unwrap_or("").to_string();
                    let (bytes, close) = answer(&line);
                    if s.write_all(bytes).await.is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// An address nothing listens on (bound, then released).
pub async fn dead_addr() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    drop(l);
    a
}

// ---------------------------------------------------------------------------------------------
// Scripted decisions.

pub fn window(kind: WindowKind, limit: u64, remaining: u64) -> WindowState {
    let (window_secs, reset_secs) = match kind {
        WindowKind::Burst => (60, 42),
        WindowKind::Hourly | WindowKind::KeyHourly => (3600, 1800),
        WindowKind::Daily => (86400, 40000),
    };
    WindowState {
        kind,
        limit,
        remaining,
        window_secs,
        reset_secs,
    }
}

pub fn allow(tier: Tier, identity: &str) -> Decision {
    Decision::builder(tier, identity)
        .window(window(WindowKind::Burst, 120, 100))
        .window(window(WindowKind::Hourly, 600, 500))
        .window(window(WindowKind::Daily, 1000, 900))
        .upgrade(limiter_daemon::config::Config::default().upgrade.hint(tier))
        .cost(1)
        .build()
}

pub fn reject(tier: Tier, reason: Reason, retry: u64, identity: &str) -> Decision {
    let mut d = allow(tier, identity);
    d.reject(reason, retry);
    d
}

pub fn delay(tier: Tier, ms: u64, kind: DelayKind, identity: &str) -> Decision {
    let mut d = allow(tier, identity);
    d.hold(Duration::from_millis(ms), kind);
    d.windows[2].remaining = 0;
    d.warn_remaining = Some(0);
    d
}

/// What a scripted decider saw.
#[derive(Clone, Debug)]
pub struct Seen {
    pub peer: std::net::IpAddr,
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
    pub unattributed: bool,
}

pub struct Scripted<F> {
    pub f: F,
    pub seen: parking_lot::Mutex<Vec<Seen>>,
}

impl<F: Fn(&RequestView<'_>) -> Decision + Send + Sync + 'static> Decider for Scripted<F> {
    fn decide(&self, req: &RequestView<'_>) -> Decision {
        self.seen.lock().push(Seen {
            peer: req.client.ip(),
            method: req.method.to_string(),
            path: req.path.to_string(),
            headers: req.headers.clone(),
            unattributed: matches!(
                req.client,
                limiter_daemon::identity::client_ip::Client::Unattributed(_)
            ),
        });
        (self.f)(req)
    }
}

pub fn scripted<F: Fn(&RequestView<'_>) -> Decision + Send + Sync + 'static>(
    f: F,
) -> Arc<Scripted<F>> {
    Arc::new(Scripted {
        f,
        seen: parking_lot::Mutex::new(Vec::new()),
    })
}

/// Decides from the `x-test-who` header: `scanner` is delayed by `x-test-delay-ms`, `burst`
/// rejected, anyone else allowed.
pub type DecideFn = fn(&RequestView<'_>) -> Decision;

pub fn by_header() -> Arc<Scripted<DecideFn>> {
    scripted(by_header_decide as DecideFn)
}

fn by_header_decide(req: &RequestView<'_>) -> Decision {
    {
        let who = req
            .headers
            .get("x-test-who")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("anon")
            .to_string();
        let ms = req
            .headers
            .get("x-test-delay-ms")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        match who.as_str() {
            w if w.starts_with("scanner") => delay(Tier::Anon, ms, DelayKind::Soft, w),
            "burst" => reject(Tier::Anon, Reason::Burst, 42, &who),
            _ => allow(Tier::Anon, &who),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The daemon's HTTP server, in-process.

pub struct Running {
    pub proxy: Option<SocketAddr>,
    pub api: SocketAddr,
    pub gate: Arc<HoldGate>,
    pub upstream: Arc<UpstreamCounters>,
    stop: Option<oneshot::Sender<()>>,
    pub task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub fn proxy_url(&self, path: &str) -> String {
        format!("http://{}{}", self.proxy.expect("proxy listener"), path)
    }
    pub fn api_url(&self, path: &str) -> String {
        format!("http://{}{}", self.api, path)
    }
    /// Signals shutdown and waits for the server to drain.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        (&mut self.task).await.unwrap();
    }
}

/// `[http]` for tests: proxy to `upstream` (if any) and API on ephemeral loopback ports.
pub fn settings(upstream: Option<SocketAddr>, extra: &str) -> HttpSettings {
    let mut text = String::from("api_listen = [\"127.0.0.1:0\"]\n");
    if let Some(up) = upstream {
        text.push_str(&format!(
            "proxy_listen = [\"127.0.0.1:0\"]\nupstream = \"http://{up}\"\n"
        ));
    }
    text.push_str(extra);
    HttpSettings::from_toml(&text).unwrap()
}

pub async fn start(settings: HttpSettings, decider: Arc<dyn Decider>) -> Running {
    let server = HttpServer::bind(&settings, Hints::from_settings(&settings), decider)
        .await
        .unwrap();
    let proxy = server.proxy_addrs().unwrap().first().copied();
    let api = server.api_addrs().unwrap()[0];
    let gate = server.hold_gate();
    let upstream = server.upstream_counters();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        server
            .run(async move {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    Running {
        proxy,
        api,
        gate,
        upstream,
        stop: Some(tx),
        task,
    }
}

// ---------------------------------------------------------------------------------------------
// A plain client.

pub fn client() -> Client<HttpConnector, ClientBody> {
    Client::builder(TokioExecutor::new()).build_http()
}

pub fn empty() -> ClientBody {
    Full::new(Bytes::new()).map_err(|e| match e {}).boxed()
}

pub fn body(b: impl Into<Bytes>) -> ClientBody {
    Full::new(b.into()).map_err(|e| match e {}).boxed()
}

/// Sends `req` and reads the whole response body.
pub async fn send(req: Request<ClientBody>) -> (http::response::Parts, Bytes) {
    let resp = client().request(req).await.expect("request failed");
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    (parts, bytes)
}

pub async fn get(url: &str, headers: &[(&str, &str)]) -> (http::response::Parts, Bytes) {
    let mut b = Request::get(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    send(b.body(empty()).unwrap()).await
}

pub fn json(bytes: &Bytes) -> serde_json::Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(bytes)))
}

pub fn header<'a>(parts: &'a http::response::Parts, name: &str) -> &'a str {
    parts
        .headers
        .get(name)
        .unwrap_or_else(|| panic!("header {name} missing; have {:?}", parts.headers))
        .to_str()
        .unwrap()
}

/// Polls `f` until true, with a deadline (no fixed sleeps).
pub async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The real engine on an embedded store, with a manual clock and manual key refresh, as every
/// HTTP test drives it.
pub fn manual_engine(
    cfg: limiter_daemon::config::Config,
    clock: &limiter_daemon::clock::ManualClock,
    now_ms: u64,
) -> std::sync::Arc<limiter_daemon::engine::Engine> {
    use limiter_daemon::engine::{Engine, EngineOptions, KeyRefresh};
    let store = limiter_daemon::embedded::EmbeddedStore::open(&cfg.store, now_ms).unwrap();
    std::sync::Arc::new(Engine::with_options(
        std::sync::Arc::new(cfg),
        std::sync::Arc::new(store),
        std::sync::Arc::new(limiter_daemon::engine::sink::NoKernel),
        std::sync::Arc::new(clock.clone()),
        EngineOptions {
            key_refresh: KeyRefresh::Manual,
        },
    ))
}
