//! The proxy's two request paths, its own HTTP/1.1 loop and hyper's server, are one job: for
//! the same requests under the same config they must reach the same decisions. This property
//! test generates configs (trusted proxies or none, `X-Forwarded-For` or `Forwarded`, burst
//! and quota sizes, a delay route, a JWT secret, an issued API key) and sequences of bodyless
//! requests (forwarding headers single, chained, repeated and malformed, including fields that
//! name no usable client (`unknown`, `_hidden`, empty); session cookies; JWTs
//! good and bad; keys verified, invented and malformed; field names in any case), sends each
//! sequence over raw sockets to a proxy with the own loop and to one with `max_header_count = 128`, more fields than the loop parses
//! (a `POST` with a body on the first is decided before the hand-over to hyper, a third way),
//! each in front of its own real engine at the same manual clock, and requires the same
//! decision (tier, identity, action, reason, windows, delay) and the same status and
//! rate-limit fields for every request.
//!
//! The first defect it guards against: the own loop skipped a trusted proxy's
//! `X-Forwarded-For` before building the decision's view, so every bodyless GET behind a proxy
//! was metered as the proxy.

use crate::http_support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http_support::*;
use limiter_daemon::clock::ManualClock;
use limiter_daemon::config::{Config, EnvMap};
use limiter_daemon::engine::decider::{Decider, RequestView};
use limiter_daemon::engine::keys::IssueKey;
use limiter_daemon::engine::Engine;
use limiter_daemon::model::Decision;
use parking_lot::Mutex;
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// 2026-11-29T10:00:30Z.
const T0: u64 = 1_795_946_430_000;
const JWT_SECRET: &str = "differential-test-secret-0123456789";
/// Stands for the issued key in generated requests; each world substitutes its own.
const KEY: &str = "{KEY}";

/// The real engine, with every decision it makes written down.
struct Recorder {
    engine: Arc<Engine>,
    seen: Mutex<Vec<Decision>>,
    /// Per decision: whether the view carried `Host`, which no decision reads. Only hyper's
    /// path hands over the whole map, so this tells which path served the request.
    whole_map: Mutex<Vec<bool>>,
}

impl Decider for Recorder {
    fn decide(&self, req: &RequestView<'_>) -> Decision {
        let d = Decider::decide(&*self.engine, req);
        self.seen.lock().push(d.clone());
        self.whole_map.lock().push(req.headers.contains_key("host"));
        d
    }

    fn reads_header(&self, name: &[u8]) -> bool {
        self.engine.reads_header(name)
    }
}

/// A generated configuration.
#[derive(Clone, Debug)]
struct Setup {
    /// `trusted_proxies`, as TOML list items.
    trusted: &'static str,
    forwarded: bool,
    burst: u32,
    quota: u32,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop_oneof![
            Just(""),
            Just("\"127.0.0.1\""),
            Just("\"127.0.0.0/8\", \"10.0.0.0/8\", \"2001:db8:ffff::/48\""),
        ],
        any::<bool>(),
        2u32..6,
        1u32..4,
    )
        .prop_map(|(trusted, forwarded, burst, quota)| Setup {
            trusted,
            forwarded,
            burst,
            quota,
        })
}

impl Setup {
    fn toml(&self) -> String {
        format!(
            r#"
[tiers.anon]
burst = {burst}
hourly = 40
[tiers.session]
burst = {session_burst}
multiplier = 2
[tiers.sponsor]
burst = 30
hourly = 100
[quota]
anon = {quota}
token = {token}
soft_delay_ms = 1
soft_window = 2
hard_delay_ms = 2
[default_route]
limits = ["burst", "hourly"]
[[routes]]
prefix = "/scan"
over_quota = "delay"
[[routes]]
prefix = "/daily"
over_quota = "reject"
[[routes]]
prefix = "/api/feeds"
key_limit = true
[identity]
trusted_proxies = [{trusted}]
forwarded_header = "{header}"
[jwt]
algorithm = "HS256"
secret = "{JWT_SECRET}"
[lockout]
base = "60s"
"#,
            burst = self.burst,
            session_burst = self.burst + 2,
            quota = self.quota,
            token = self.quota + 2,
            trusted = self.trusted,
            header = if self.forwarded {
                "forwarded"
            } else {
                "x-forwarded-for"
            },
        )
    }
}

/// A generated request: method, path, fields (names as sent); a `POST` carries a body.
#[derive(Clone, Debug)]
struct Req {
    method: &'static str,
    path: &'static str,
    fields: Vec<(String, String)>,
}

fn jwt(sub: &str, exp: u64) -> String {
    let claims = serde_json::json!({"sub": sub, "jti": format!("{sub}-jti"), "exp": exp});
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()),
    )
    .unwrap()
}

/// A field name in one of the spellings a client might use.
fn spelled(name: &'static str) -> impl Strategy<Value = String> {
    prop_oneof![
        Just(name.to_string()),
        Just(name.to_ascii_uppercase()),
        Just(
            name.split('-')
                .map(|w| {
                    let mut c = w.chars();
                    c.next()
                        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                        .unwrap_or_default()
                })
                .collect::<Vec<_>>()
                .join("-")
        ),
    ]
}

fn field() -> impl Strategy<Value = (String, String)> {
    let xff = prop_oneof![
        Just("203.0.113.66"),
        Just("198.51.100.20"),
        Just("198.51.100.20, 10.1.2.3"),
        Just("203.0.113.66, 198.51.100.20, 10.9.9.9"),
        Just("2001:db8::7"),
        Just("[2001:db8:1::9]:443"),
        Just("not-an-address"),
        Just(""),
        // Fields naming no usable client: unattributed callers of the proxy, never struck.
        Just("unknown"),
        Just("_hidden"),
        Just("not-an-address, 198.51.100.20"),
        Just("198.51.100.20, "),
    ];
    let fwd = prop_oneof![
        Just("for=203.0.113.66"),
        Just("for=\"[2001:db8:cafe::17]:4711\";proto=https, for=10.1.1.1"),
        Just("for=198.51.100.20;by=10.0.0.2"),
        Just("for=_hidden"),
        Just("for=unknown, for=10.0.0.3"),
        Just("for=unknown"),
        Just("for=\"_gazonk\""),
        Just("for="),
        Just("proto=https"),
    ];
    let cookie = prop_oneof![
        Just("session=abc"),
        Just("theme=dark; session=x"),
        Just("other=1"),
    ];
    let auth = prop_oneof![
        Just(format!("Bearer {}", jwt("alice", 4_102_444_800))),
        Just(format!("Bearer {}", jwt("bob", 1_000))),
        Just("Bearer not.a.token".to_string()),
        Just(format!("Bearer {KEY}")),
        Just("Basic dXNlcjpwYXNz".to_string()),
    ];
    let key = prop_oneof![
        Just(KEY.to_string()),
        Just("rsa_deadbeef_wrongsecretwrongsecretxx".to_string()),
        Just("rsa_nothex".to_string()),
    ];
    prop_oneof![
        (spelled("x-forwarded-for"), xff).prop_map(|(n, v)| (n, v.to_string())),
        (spelled("forwarded"), fwd).prop_map(|(n, v)| (n, v.to_string())),
        (spelled("cookie"), cookie).prop_map(|(n, v)| (n, v.to_string())),
        (spelled("authorization"), auth),
        (spelled("x-api-key"), key),
        (spelled("x-real-ip"), Just("192.0.2.44".to_string())),
        (spelled("user-agent"), Just("crawler/1.0".to_string())),
    ]
}

fn request() -> impl Strategy<Value = Req> {
    (
        prop_oneof![Just("GET"), Just("HEAD"), Just("OPTIONS"), Just("POST")],
        prop_oneof![
            Just("/"),
            Just("/scan/a?q=1"),
            Just("/daily"),
            Just("/api/feeds/1")
        ],
        proptest::collection::vec(field(), 0..5),
    )
        .prop_map(|(method, path, fields)| Req {
            method,
            path,
            fields,
        })
}

/// One side: an engine with its recorder behind a proxy.
struct Side {
    recorder: Arc<Recorder>,
    key: String,
    d: Running,
    _state: tempfile::TempDir,
}

/// What a client saw of one answer: status and the rate-limit fields.
fn seen_fields(raw: &[u8]) -> (u16, Vec<(String, String)>) {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut fields);
    let Ok(httparse::Status::Complete(_)) = resp.parse(raw) else {
        panic!("no complete response: {:?}", String::from_utf8_lossy(raw));
    };
    let mut kept: Vec<(String, String)> = resp
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .filter(|(n, _)| {
            n.starts_with("x-ratelimit") || n.starts_with("ratelimit") || n == "retry-after"
        })
        .collect();
    kept.sort();
    (resp.code.unwrap(), kept)
}

/// Sends `req` alone on a connection and reads the whole answer.
async fn exchange(side: &Side, req: &Req) -> Vec<u8> {
    let mut wire = format!("{} {} HTTP/1.1\r\nHost: site\r\n", req.method, req.path);
    for (n, v) in &req.fields {
        wire.push_str(&format!("{n}: {}\r\n", v.replace(KEY, &side.key)));
    }
    if req.method == "POST" {
        // A body: the own loop hands the request to hyper, deciding it first (held.rs).
        wire.push_str("Content-Length: 4\r\nConnection: close\r\n\r\nbody");
    } else {
        wire.push_str("Connection: close\r\n\r\n");
    }
    let mut s = tokio::net::TcpStream::connect(side.d.proxy.unwrap())
        .await
        .unwrap();
    s.write_all(wire.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got))
        .await
        .expect("answered within 10 s")
        .unwrap();
    got
}

async fn run_case(setup: Setup, reqs: Vec<Req>, up: std::net::SocketAddr) {
    // The first side issues the key; the second opens a copy of its state, so both hold the
    // same key, and the same hash secret makes their identities comparable.
    let text = |dir: &Path| {
        format!(
            "{}\n[store]\nstate_dir = \"{}\"\nhash_secret = \"differential-hash-secret\"\n",
            setup.toml(),
            dir.display()
        )
    };
    let clock_a = ManualClock::new(T0);
    let clock_b = ManualClock::new(T0);
    let dir_a = tempfile::tempdir().unwrap();
    let cfg =
        Config::from_toml_str(&text(dir_a.path()), Path::new("a.toml"), &EnvMap::new()).unwrap();
    let engine_a = manual_engine(cfg, &clock_a, T0);
    let key = engine_a
        .keys()
        .issue(IssueKey {
            hourly_limit: Some(3),
            tier: None,
            owner: Some("differential".into()),
            note: None,
        })
        .unwrap()
        .token;
    let dir_b = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir_a.path()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), dir_b.path().join(entry.file_name())).unwrap();
        }
    }
    let cfg =
        Config::from_toml_str(&text(dir_b.path()), Path::new("b.toml"), &EnvMap::new()).unwrap();
    let engine_b = manual_engine(cfg, &clock_b, T0);

    let mut sides = Vec::new();
    for (engine, state, path) in [
        (engine_a, dir_a, ""),
        (engine_b, dir_b, "max_header_count = 128\n"),
    ] {
        let recorder = Arc::new(Recorder {
            engine,
            seen: Mutex::new(Vec::new()),
            whole_map: Mutex::new(Vec::new()),
        });
        let d = start(
            settings(Some(up), &format!("worker_threads = 1\n{path}")),
            recorder.clone(),
        )
        .await;
        sides.push(Side {
            recorder,
            key: key.clone(),
            d,
            _state: state,
        });
    }
    for (i, req) in reqs.iter().enumerate() {
        let own = exchange(&sides[0], req).await;
        let hyper = exchange(&sides[1], req).await;
        for s in &sides {
            s.recorder.engine.keys().process_pending();
        }
        let (own_seen, hyper_seen) = (sides[0].recorder.seen.lock(), sides[1].recorder.seen.lock());
        assert_eq!(
            own_seen.len(),
            i + 1,
            "own loop: one decision per request ({req:?})"
        );
        assert_eq!(hyper_seen.len(), i + 1, "hyper: one decision per request");
        assert_eq!(
            (
                sides[0].recorder.whole_map.lock()[i],
                sides[1].recorder.whole_map.lock()[i]
            ),
            (req.method == "POST", true),
            "request {i} {req:?}: the own loop served the first side (its decision before \
             hyper for a body), hyper the second"
        );
        assert_eq!(
            own_seen[i], hyper_seen[i],
            "request {i} {req:?} under {setup:?}: the own loop and hyper decided differently"
        );
        assert_eq!(
            seen_fields(&own),
            seen_fields(&hyper),
            "request {i} {req:?} under {setup:?}: status or rate-limit fields differ"
        );
    }
    // Whatever the fields said, neither side locked the client the tests connect from when it
    // is a trusted proxy: junk fields make unattributed callers, which are never struck.
    if !setup.trusted.is_empty() {
        for s in &sides {
            let locked = s
                .recorder
                .engine
                .lockouts()
                .get("127.0.0.1".parse().unwrap());
            assert_eq!(
                locked.unwrap(),
                None,
                "the trusted proxy was locked out under {setup:?} by {reqs:?}"
            );
        }
    }
    for s in sides {
        s.d.stop().await;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_own_loop_and_hyper_decide_alike(
        setup in setup(),
        reqs in proptest::collection::vec(request(), 1..10),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let up = start_upstream().await;
            run_case(setup, reqs, up.addr).await;
        });
    }
}

/// The reproduction from the probe: behind a trusted proxy, one noisy client must not lock out
/// another, on either path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_noisy_client_behind_a_trusted_proxy_locks_out_only_itself() {
    let up = start_upstream().await;
    for path in ["", "max_header_count = 128\n"] {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[tiers.anon]\nburst = 5\n[identity]\ntrusted_proxies = [\"127.0.0.1\"]\n\
             [store]\nstate_dir = \"{}\"\n",
            dir.path().display()
        );
        let cfg = Config::from_toml_str(&text, Path::new("t.toml"), &EnvMap::new()).unwrap();
        let clock = ManualClock::new(T0);
        let engine = manual_engine(cfg, &clock, T0);
        let d = start(settings(Some(up.addr), path), engine).await;
        let url = d.proxy_url("/page");
        let mut statuses = Vec::new();
        for _ in 0..7 {
            let (parts, _) = get(&url, &[("x-forwarded-for", "203.0.113.66")]).await;
            statuses.push(parts.status.as_u16());
        }
        assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429], "{path:?}");
        let (parts, _) = get(&url, &[("x-forwarded-for", "198.51.100.20")]).await;
        assert_eq!(
            parts.status, 200,
            "{path:?}: another client is not locked out"
        );
        d.stop().await;
    }
}
