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

mod agent_support;
mod ops_support;
mod tls_support;

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use limiter_daemon::identity::web_bot_auth::signer;
use ops_support::*;
use ring::signature::Ed25519KeyPair;

/// Fields of a signed request, as (name, value) pairs.
type Signed = Vec<(String, String)>;

fn npm_signed(dir: &Path, agent: &str, keyfile: &Path) -> (Signed, String) {
    let s = agent_support::npm_sign_with(dir, "https://test/page", agent, Some(keyfile));
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

fn via_proxy(proxy: std::net::SocketAddr, from: &str, signed: &Signed) -> Answer {
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
    let npm = agent_support::npm_dir();
    let tmp = tempfile::tempdir().unwrap();
    tls_support::ca(tmp.path(), "ca");
    tls_support::leaf(tmp.path(), "ca", "srv", "localhost", "IP:127.0.0.1");
    let served = Arc::new(agent_support::Served::default());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir_addr = rt.block_on(agent_support::serve(tmp.path(), Arc::clone(&served)));
    let agent = format!("https://{dir_addr}");
    let keyfile = tmp.path().join("agent.jwk");
    let (good, x) = npm_signed(&npm, &format!("sig1=\"{agent}\""), &keyfile);
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
    let mut d = Daemon::start_with_env(tmp.path(), &text, &[], &[("SSL_CERT_FILE", &ca)], api);
    d.wait_listening(proxy);

    // Not known yet: metered as the address, the directory fetched behind the request.
    let first = via_proxy(proxy, "203.0.113.1", &good);
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.header("x-ratelimit-tier"), "anon", "{first:?}");
    assert_eq!(signatures(metrics_addr, "unverified"), 1);
    d.wait_log("agent directory fetched", 1);
    assert_eq!(served.directory_fetches(), 1);

    // Now the agent, from two addresses and two surfaces, on one budget of its own (6/hour).
    let a = via_proxy(proxy, "203.0.113.1", &good);
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.header("x-ratelimit-tier"), "agent", "{a:?}");
    assert_eq!(a.header("x-ratelimit-limit-hour"), "6");
    assert_eq!(hourly_left(a.header("ratelimit")), 5);
    let b = via_decide(api, "198.51.100.2", &good);
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
        c.header("x-ratelimit-tier"),
        "agent",
        "bare-string form: {c:?}"
    );
    assert_eq!(hourly_left(c.header("ratelimit")), 3);
    for left in (0..3).rev() {
        let r = via_proxy(proxy, "192.0.2.77", &good);
        assert_eq!((r.status, hourly_left(r.header("ratelimit"))), (200, left));
    }
    let over = via_proxy(proxy, "192.0.2.78", &good);
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
    assert_eq!(r.header("x-ratelimit-tier"), "anon", "{r:?}");
    assert_eq!(signatures(metrics_addr, "invalid"), 7);
    assert_eq!(signatures(metrics_addr, "verified"), verified);
    // No directory fetched again for any of it (served with max-age=600).
    assert_eq!(served.directory_fetches(), 1);
}
