//! The agent rung against the real daemon binary. An agent's key directory is served over
//! HTTPS by a local server (a test CA made by `openssl`, trusted through `SSL_CERT_FILE`);
//! Cloudflare's `web-bot-auth` npm signer signs with the agent's one key.
//!
//! - The first signed request is metered as what it otherwise is (`unverified`), and the
//!   directory is fetched behind it; then the signer's requests through the proxy and through
//!   `/v1/decide`, from two different source addresses, are metered as the agent: tier
//!   `agent`, its own `[[agents.budgets]]` hourly budget, one budget for both addresses, and
//!   its 429 tells it to pace itself or get a key at `/account`; the admin API's stats list it
//!   by its directory with proof `signature`, and `/admin/v1/crawlers` the directory held.
//! - A tampered signature, an expired one, one created in the future, the wrong tag, one not
//!   covering `@authority`, and a key the agent's directory does not list are each metered as
//!   the address (tier `anon`) and counted `invalid` in `agent_signatures_total`.
//! - Replay: a captured signature (with a nonce) sent again, from another address or the same,
//!   is metered as the sender (`replayed`), and that address is not refused; a signature
//!   covering `@path` verifies on its path only; one living an hour is invalid.
//! - The directory cache: 4,200 junk `Signature-Agent` directories from one address do not
//!   keep a new agent out; six directories that stall until the fetch timeout do not hold up
//!   a valid agent behind them for six timeouts.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use limiter_daemon::identity::web_bot_auth::signer;
use limiter_tests::client::metrics;
use limiter_tests::client::ratelimit_field;
use limiter_tests::client::request;
use limiter_tests::client::Resp;
use limiter_tests::daemon::config_text;
use limiter_tests::daemon::Daemon;
use limiter_tests::free_addr;
use limiter_tests::upstream::Upstream;
use ring::signature::Ed25519KeyPair;

/// Fields of a signed request, as (name, value) pairs.
type Signed = Vec<(String, String)>;

fn npm_signed(dir: &Path, agent: &str, keyfile: &Path) -> (Signed, String) {
    let s = crate::rig::npm_sign_with(dir, "https://test/page", agent, Some(keyfile));
    let field = |k: &str| s[k].as_str().unwrap().to_owned();
    (
        vec![
            ("signature".into(), field("signature")),
            ("signature-input".into(), field("input")),
            ("signature-agent".into(), field("agent")),
        ],
        field("x"),
    )
}

fn rust_signed(key: &Ed25519KeyPair, agent: &str, components: &str, params: &str) -> Signed {
    let h = signer::sign(key, agent, "test", components, params);
    ["signature", "signature-input", "signature-agent"]
        .iter()
        .map(|n| (n.to_string(), h[*n].to_str().unwrap().to_owned()))
        .collect()
}

fn via_proxy(proxy: std::net::SocketAddr, from: &str, signed: &Signed) -> Resp {
    let mut h: Vec<(&str, &str)> = signed
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    h.push(("x-forwarded-for", from));
    request(proxy, "GET", "/page", &h, "")
}

/// `/v1/decide` for `ip` with the signed fields (and `Host: test`, as the proxy sees it).
fn via_decide(api: std::net::SocketAddr, ip: &str, signed: &Signed) -> serde_json::Value {
    let mut headers = serde_json::Map::new();
    headers.insert("host".into(), "test".into());
    for (k, v) in signed {
        headers.insert(k.clone(), v.clone().into());
    }
    let body = serde_json::json!({"ip": ip, "method": "GET", "path": "/page", "headers": headers});
    let a = request(api, "POST", "/v1/decide", &[], &body.to_string());
    assert_eq!(a.status, 200, "{a:?}");
    a.json()
}

fn hourly_left(ratelimit: &str) -> u64 {
    ratelimit_field(ratelimit)
        .into_iter()
        .find(|(n, _, _)| n == "hourly")
        .unwrap_or_else(|| panic!("no hourly window in {ratelimit:?}"))
        .1
}

fn signatures(metrics_addr: std::net::SocketAddr, outcome: &str) -> u64 {
    let text = metrics(metrics_addr);
    let needle = format!("agent_signatures_total{{outcome=\"{outcome}\"}} ");
    text.lines()
        .find_map(|l| {
            l.split_once(&needle)
                .map(|(_, v)| v.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no {needle} in:\n{text}"))
}

#[test]
fn a_signed_agent_is_metered_as_itself_and_a_bad_signature_as_its_address() {
    let npm = crate::rig::npm_dir();
    let tmp = tempfile::tempdir().unwrap();
    limiter_tests::tls::ca(tmp.path(), "ca");
    limiter_tests::tls::leaf(tmp.path(), "ca", "srv", "localhost", "IP:127.0.0.1");
    let served = Arc::new(crate::rig::Served::default());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir_addr = rt.block_on(crate::rig::serve(tmp.path(), Arc::clone(&served)));
    let agent = format!("https://{dir_addr}");
    let keyfile = tmp.path().join("agent.jwk");
    let (good, x) = npm_signed(&npm, &format!("sig1=\"{agent}\""), &keyfile);
    // Each request signed afresh, as the signer does: its signatures carry a nonce, and a
    // nonce verifies once.
    let fresh = || npm_signed(&npm, &format!("sig1=\"{agent}\""), &keyfile).0;
    *served.directory.lock().unwrap() =
        format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","x":"{x}"}}]}}"#).into_bytes();

    let up = Upstream::start();
    let (proxy, api, metrics_addr, admin) = (free_addr(), free_addr(), free_addr(), free_addr());
    let text = config_text(
        tmp.path(),
        &format!(
            "[identity]\ntrusted_proxies = [\"127.0.0.1\"]\n\
             [agents]\nenabled = true\nallow_internal = [\"127.0.0.1\"]\n\
             [[agents.budgets]]\nagent = \"{agent}\"\nhourly = 6\n\
             [admin]\nlisten = \"{admin}\"\n[metrics]\nlisten = \"{metrics_addr}\"\n\
             [http]\nproxy_listen = [\"{proxy}\"]\napi_listen = [\"{api}\"]\nupstream = \"http://{}\"\n",
            up.addr
        ),
    );
    let ca = tmp.path().join("ca.pem");
    let mut d = Daemon::run_with_env(tmp.path(), &text, &[], &[("SSL_CERT_FILE", &ca)], api);
    d.wait_listening(proxy);

    // Not known yet: metered as the address, the directory fetched behind the request.
    let first = via_proxy(proxy, "203.0.113.1", &good);
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.field("x-ratelimit-tier"), "anon", "{first:?}");
    assert_eq!(signatures(metrics_addr, "unverified"), 1);
    d.wait_log("agent directory fetched", 1);
    assert_eq!(served.directory_fetches(), 1);

    // Now the agent, from two addresses and two surfaces, on one budget of its own (6/hour).
    let a = via_proxy(proxy, "203.0.113.1", &fresh());
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.field("x-ratelimit-tier"), "agent", "{a:?}");
    assert_eq!(a.field("x-ratelimit-limit-hour"), "6");
    assert_eq!(hourly_left(a.field("ratelimit")), 5);
    let b = via_decide(api, "198.51.100.2", &fresh());
    assert_eq!(b["tier"], "agent", "{b}");
    assert_eq!(b["headers"]["x-ratelimit-limit-hour"], "6", "{b}");
    assert_eq!(
        hourly_left(b["headers"]["ratelimit"].as_str().unwrap()),
        4,
        "one budget for both addresses: {b}"
    );
    // Signed again by the npm signer, through the proxy from the second address.
    let (again, _) = npm_signed(&npm, &format!("\"{agent}\""), &keyfile);
    let c = via_proxy(proxy, "198.51.100.2", &again);
    assert_eq!(
        c.field("x-ratelimit-tier"),
        "agent",
        "bare-string form: {c:?}"
    );
    assert_eq!(hourly_left(c.field("ratelimit")), 3);
    for left in (0..3).rev() {
        let r = via_proxy(proxy, "192.0.2.77", &fresh());
        assert_eq!((r.status, hourly_left(r.field("ratelimit"))), (200, left));
    }
    let over = via_proxy(proxy, "192.0.2.78", &fresh());
    assert_eq!(over.status, 429, "{over:?}");
    let problem = over.json();
    assert_eq!(problem["tier"], "agent");
    let upgrade = problem["upgrade"].as_str().unwrap();
    assert!(
        upgrade.contains("RateLimit") && upgrade.contains("/account"),
        "{upgrade}"
    );
    let verified = signatures(metrics_addr, "verified");
    assert_eq!(verified, 7);
    // The operator page's crawlers and agents panel: the agent by its directory, proven by
    // its signature, and the directory held with its key.
    let token = std::fs::read_to_string(tmp.path().join("state").join("admin-token")).unwrap();
    let auth = format!("Bearer {}", token.trim());
    let admin_get = |path: &str| {
        let r = request(admin, "GET", path, &[("authorization", &auth)], "");
        assert_eq!(r.status, 200, "{r:?}");
        r.json()
    };
    let stats = admin_get("/admin/v1/stats");
    let named: Vec<_> = stats["crawlers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"].as_str().unwrap().starts_with(&agent))
        .collect();
    assert_eq!(named.len(), 1, "{stats}");
    assert_eq!(named[0]["proof"], "signature", "{stats}");
    assert_eq!(
        (&named[0]["requests"], &named[0]["refused"]),
        (&serde_json::json!(7), &serde_json::json!(1)),
        "{stats}"
    );
    let crawlers = admin_get("/admin/v1/crawlers");
    let dirs = crawlers["directories"].as_array().unwrap();
    assert_eq!(dirs.len(), 1, "{crawlers}");
    assert!(
        dirs[0]["url"].as_str().unwrap().starts_with(&agent),
        "{crawlers}"
    );
    assert_eq!(
        (&dirs[0]["keys"], &dirs[0]["state"]),
        (&serde_json::json!(1), &serde_json::json!("ok"))
    );

    // Invalid signatures: each from its own address, metered as it (the anonymous rung).
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let mine = Ed25519KeyPair::from_seed_unchecked(&[5; 32]).unwrap();
    let both = "\"@authority\" \"signature-agent\"";
    let p = |c: i64, e: i64, tag: &str| signer::params(&mine, c, e, tag);
    let mut tampered = good.clone();
    let sig = &mut tampered[0].1;
    let i = sig.find(':').unwrap() + 2;
    let flipped = if &sig[i..=i] == "A" { "B" } else { "A" };
    sig.replace_range(i..=i, flipped);
    let cases = [
        ("tampered", tampered),
        (
            "expired",
            rust_signed(
                &mine,
                &agent,
                both,
                &p(now - 7200, now - 3600, "web-bot-auth"),
            ),
        ),
        (
            "future created",
            rust_signed(
                &mine,
                &agent,
                both,
                &p(now + 3600, now + 7200, "web-bot-auth"),
            ),
        ),
        (
            "wrong tag",
            rust_signed(&mine, &agent, both, &p(now, now + 300, "other-tag")),
        ),
        (
            "no @authority",
            rust_signed(
                &mine,
                &agent,
                "\"signature-agent\"",
                &p(now, now + 300, "web-bot-auth"),
            ),
        ),
        (
            "a key the directory does not list",
            rust_signed(&mine, &agent, both, &p(now, now + 300, "web-bot-auth")),
        ),
    ];
    for (n, (what, signed)) in cases.iter().enumerate() {
        let ip = format!("203.0.113.{}", 100 + n);
        let v = via_decide(api, &ip, signed);
        assert_eq!(v["tier"], "anon", "{what}: {v}");
        assert_eq!(v["headers"]["x-ratelimit-limit-hour"], "600", "{what}: {v}");
        assert_eq!(signatures(metrics_addr, "invalid"), n as u64 + 1, "{what}");
    }
    // Through the proxy too.
    let r = via_proxy(proxy, "203.0.113.120", &cases[0].1);
    assert_eq!(r.field("x-ratelimit-tier"), "anon", "{r:?}");
    assert_eq!(signatures(metrics_addr, "invalid"), 7);
    assert_eq!(signatures(metrics_addr, "verified"), verified);
    // No directory fetched again for any of it (served with max-age=600).
    assert_eq!(served.directory_fetches(), 1);
}

const BOTH: &str = "\"@authority\" \"signature-agent\"";

fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `key`'s signature of a GET of `path` from `agent`, created now, living 5 minutes, with
/// `nonce` if given.
fn signed_now(
    key: &Ed25519KeyPair,
    agent: &str,
    path: Option<&str>,
    components: &str,
    nonce: Option<&str>,
) -> Signed {
    let now = now_s();
    let mut params = signer::params(key, now, now + 300, "web-bot-auth");
    if let Some(n) = nonce {
        params.push_str(&format!(";nonce=\"{n}\""));
    }
    let h = signer::sign_path(key, agent, "test", path, components, &params);
    ["signature", "signature-input", "signature-agent"]
        .iter()
        .map(|n| (n.to_string(), h[*n].to_str().unwrap().to_owned()))
        .collect()
}

/// A `/v1/decide` body for `ip` on `path` with the signed fields (and `Host: test`).
fn decide_body(ip: &str, path: &str, signed: &Signed) -> String {
    let mut headers = serde_json::Map::new();
    headers.insert("host".into(), "test".into());
    for (k, v) in signed {
        headers.insert(k.clone(), v.clone().into());
    }
    serde_json::json!({"ip": ip, "method": "GET", "path": path, "headers": headers}).to_string()
}

/// `/v1/decide` for `ip` on `path` with the signed fields; the tier it was metered on.
fn tier_of(api: std::net::SocketAddr, ip: &str, path: &str, signed: &Signed) -> String {
    let a = request(
        api,
        "POST",
        "/v1/decide",
        &[],
        &decide_body(ip, path, signed),
    );
    assert_eq!(a.status, 200, "{a:?}");
    a.json()["tier"].as_str().unwrap().to_owned()
}

/// `bodies` sent to `/v1/decide` one after another on one keep-alive connection; the tiers.
async fn decide_kept_alive(api: std::net::SocketAddr, bodies: Vec<String>) -> Vec<String> {
    use http_body_util::{BodyExt, Full};
    let tcp = tokio::net::TcpStream::connect(api).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut tiers = Vec::with_capacity(bodies.len());
    for body in bodies {
        send.ready().await.unwrap();
        let req = http::Request::post("/v1/decide")
            .header("host", "test")
            .header("content-type", "application/json")
            .body(Full::new(hyper::body::Bytes::from(body)))
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        tiers.push(v["tier"].as_str().unwrap().to_owned());
    }
    tiers
}

/// A daemon verifying agents (`[agents]` plus `agents`, then `rest`), with one agent whose
/// directory (`key`'s) a local HTTPS server serves.
struct Rig {
    d: Daemon,
    proxy: std::net::SocketAddr,
    api: std::net::SocketAddr,
    metrics: std::net::SocketAddr,
    agent: String,
    served: Arc<crate::rig::Served>,
    _up: Upstream,
    rt: tokio::runtime::Runtime,
    _tmp: tempfile::TempDir,
}

fn rig(agents: &str, rest: &str, key: &Ed25519KeyPair) -> Rig {
    let tmp = tempfile::tempdir().unwrap();
    limiter_tests::tls::ca(tmp.path(), "ca");
    limiter_tests::tls::leaf(tmp.path(), "ca", "srv", "localhost", "IP:127.0.0.1");
    let served = Arc::new(crate::rig::Served::default());
    *served.directory.lock().unwrap() = signer::directory_of(key).1.into_bytes();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir_addr = rt.block_on(crate::rig::serve(tmp.path(), Arc::clone(&served)));
    let up = Upstream::start();
    let (proxy, api, metrics_addr) = (free_addr(), free_addr(), free_addr());
    let text = config_text(
        tmp.path(),
        &format!(
            "[identity]\ntrusted_proxies = [\"127.0.0.1\"]\n\
             [agents]\nenabled = true\nallow_internal = [\"127.0.0.0/8\"]\n{agents}\
             [metrics]\nlisten = \"{metrics_addr}\"\n[admin]\nlisten = \"\"\n\
             [http]\nproxy_listen = [\"{proxy}\"]\napi_listen = [\"{api}\"]\nupstream = \"http://{}\"\n\
             {rest}",
            up.addr
        ),
    );
    let ca = tmp.path().join("ca.pem");
    let mut d = Daemon::run_with_env(tmp.path(), &text, &[], &[("SSL_CERT_FILE", &ca)], api);
    d.wait_listening(proxy);
    Rig {
        d,
        proxy,
        api,
        metrics: metrics_addr,
        agent: format!("https://{dir_addr}"),
        served,
        _up: up,
        rt,
        _tmp: tmp,
    }
}

/// Polls until `key`'s agent, signing afresh each time from `ip`, is metered as the agent;
/// returns how long that took. Fails after `deadline`.
fn until_agent(r: &Rig, key: &Ed25519KeyPair, ip: &str, deadline: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let signed = signed_now(key, &r.agent, None, BOTH, None);
        if tier_of(r.api, ip, "/page", &signed) == "agent" {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < deadline,
            "the agent was not verified within {deadline:?}; log:\n{}",
            r.d.logs()
        );
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

#[test]
fn a_flood_of_junk_directories_from_one_address_does_not_shut_a_new_agent_out() {
    let key = Ed25519KeyPair::from_seed_unchecked(&[21; 32]).unwrap();
    // The flooding address is never refused for its volume here: only the directory cache's
    // own bounds stand between it and the new agent.
    let r = rig(
        "",
        "[tiers.anon]\nburst = 60000\nhourly = 1000000\n[quota]\nanon = 1000000\n\
         [networks.prefix]\nenabled = false\n",
        &key,
    );
    let junk = Ed25519KeyPair::from_seed_unchecked(&[22; 32]).unwrap();
    // 4,200 agents naming directories at private addresses: each fetch fails at once. Sent
    // over four keep-alive connections (4,200 connections would churn the ephemeral ports the
    // other tests' listeners were picked from).
    let start = Instant::now();
    let flood = (0..4u32).map(|t| {
        let bodies: Vec<String> = ((t * 1050)..((t + 1) * 1050))
            .map(|i| {
                let agent = format!("https://10.0.{}.{}", i >> 8, i & 255);
                decide_body(
                    "203.0.113.66",
                    "/page",
                    &signed_now(&junk, &agent, None, BOTH, None),
                )
            })
            .collect();
        r.rt.spawn(decide_kept_alive(r.api, bodies))
    });
    for tiers in r.rt.block_on(futures_util::future::join_all(flood)) {
        assert!(tiers.unwrap().iter().all(|t| t == "anon"));
    }
    eprintln!("4,200 junk directories sent in {:?}", start.elapsed());
    // A new, valid agent (from another address) is verified soon after.
    let took = until_agent(&r, &key, "198.51.100.7", Duration::from_secs(10));
    eprintln!("the valid agent verified {took:?} after the flood");
    assert_eq!(r.served.directory_fetches(), 1);
    // And from the flooding address too.
    until_agent(&r, &key, "203.0.113.66", Duration::from_secs(10));
}

/// A TCP server on `ip` that accepts connections and never answers (a stalled directory).
fn stalled_server(ip: &str) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming() {
            held.push(s);
        }
    });
    addr
}

#[test]
fn stalled_directories_do_not_hold_up_a_valid_agent() {
    const STALLED: u32 = 6;
    const TIMEOUT_S: u64 = 3;
    let key = Ed25519KeyPair::from_seed_unchecked(&[23; 32]).unwrap();
    let r = rig(&format!("fetch_timeout = \"{TIMEOUT_S}s\"\n"), "", &key);
    // Six agents whose directories stall until the fetch times out, each on its own host,
    // asked for by callers of six networks, ahead of the valid agent.
    for i in 0..STALLED {
        let addr = stalled_server(&format!("127.0.0.{}", i + 2));
        let junk = Ed25519KeyPair::from_seed_unchecked(&[40 + i as u8; 32]).unwrap();
        let signed = signed_now(&junk, &format!("https://{addr}"), None, BOTH, None);
        assert_eq!(
            tier_of(r.api, &format!("192.0.{i}.9"), "/page", &signed),
            "anon"
        );
    }
    let one_at_a_time = Duration::from_secs(u64::from(STALLED) * TIMEOUT_S);
    let took = until_agent(&r, &key, "198.51.100.7", one_at_a_time / 3);
    eprintln!("the valid agent verified after {took:?} (one at a time: {one_at_a_time:?})");
}

#[test]
fn a_captured_signature_is_verified_once_and_only_for_its_path() {
    let key = Ed25519KeyPair::from_seed_unchecked(&[24; 32]).unwrap();
    let r = rig("", "", &key);
    until_agent(&r, &key, "203.0.113.1", Duration::from_secs(10));
    let signatures = |o| signatures(r.metrics, o);
    // The agent's request, and the same signature captured and sent again from elsewhere.
    let captured = signed_now(&key, &r.agent, None, BOTH, Some("n-1"));
    let a = via_proxy(r.proxy, "203.0.113.1", &captured);
    assert_eq!(a.field("x-ratelimit-tier"), "agent", "{a:?}");
    let b = via_proxy(r.proxy, "198.51.100.9", &captured);
    assert_eq!(
        (b.status, b.field("x-ratelimit-tier")),
        (200, "anon"),
        "{b:?}"
    );
    assert_eq!(signatures("replayed"), 1);
    assert_eq!(tier_of(r.api, "203.0.113.1", "/page", &captured), "anon");
    assert_eq!(signatures("replayed"), 2);
    // Not refused for it: the replayer's address is verified with a signature of its own.
    let own = signed_now(&key, &r.agent, None, BOTH, Some("n-2"));
    assert_eq!(tier_of(r.api, "198.51.100.9", "/page", &own), "agent");
    // A signature covering `@path` verifies for its path only.
    let with_path = "\"@authority\" \"@path\" \"signature-agent\"";
    let page = signed_now(&key, &r.agent, Some("/page"), with_path, None);
    assert_eq!(tier_of(r.api, "203.0.113.2", "/page", &page), "agent");
    let invalid = signatures("invalid");
    assert_eq!(tier_of(r.api, "203.0.113.3", "/admin", &page), "anon");
    assert_eq!(signatures("invalid"), invalid + 1);
    // A signature living an hour is refused, whoever sends it.
    let now = now_s();
    let long = rust_signed(
        &key,
        &r.agent,
        BOTH,
        &signer::params(&key, now, now + 3600, "web-bot-auth"),
    );
    assert_eq!(tier_of(r.api, "203.0.113.4", "/page", &long), "anon");
    assert_eq!(signatures("invalid"), invalid + 2);
}
