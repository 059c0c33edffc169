//! The operator page (`GET /admin/`) and the stats it polls, against the real daemon binary:
//! the page is served without the token and loads nothing from elsewhere, `/admin/v1/stats`
//! reports decisions, top talkers and tier mix from real traffic, and in a real headless
//! Chromium the page asks for the token, shows a lockout this test made through the API, and
//! lifting it with a click removes it (checked through the API); with the real kernel program
//! attached (daemon and browser in the server namespace of a veth pair), the page shows the
//! verdict counters and the lockout map's fill, the lockout in it.

#[allow(
    dead_code,
    reason = "this test starts the daemon binary, not an in-process dataplane"
)]
use crate::kernel_support;

use limiter_tests::browser::Browser;
use limiter_tests::client::http;
use limiter_tests::daemon::Daemon;
use limiter_tests::eventually;
use serde_json::{json, Value};

fn daemon() -> (tempfile::TempDir, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), "", "");
    (dir, d)
}

/// Decisions for `ip` through `/v1/decide` (what the page then counts).
fn traffic(d: &Daemon, ip: &str, n: usize) {
    for _ in 0..n {
        d.decide(ip);
    }
}

fn lockout_ips(d: &Daemon) -> Vec<String> {
    let r = d.admin("GET", "/admin/v1/lockouts", None);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["ip"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_page_is_served_without_the_token_and_names_no_outside_asset() {
    let (_dir, d) = daemon();
    let r = http(d.admin, "GET", "/admin/", &[], None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    let csp = r.header("content-security-policy").unwrap();
    assert!(csp.starts_with("default-src 'none'"), "{csp}");
    assert!(csp.contains("connect-src 'self'"), "{csp}");
    assert!(r.body.contains("<title>limiter"), "{}", r.body);
    for external in ["src=", "href=", "http://", "https://", "url("] {
        assert!(!r.body.contains(external), "the page names {external}");
    }
    let r = http(d.admin, "GET", "/admin", &[], None);
    assert_eq!(r.status, 308);
    assert_eq!(r.header("location"), Some("/admin/"));
    // The data it shows is behind the token.
    let r = http(d.admin, "GET", "/admin/v1/stats", &[], None);
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["field"], "Authorization");
}

#[test]
fn stats_report_decisions_top_talkers_and_tier_mix_from_real_traffic() {
    let (_dir, d) = daemon();
    // 130 decisions from one address: the anonymous burst (120) refuses the last ones.
    traffic(&d, "192.0.2.50", 130);
    traffic(&d, "192.0.2.51", 3);
    let identity = |ip: &str| {
        d.admin("GET", &format!("/admin/v1/clients/{ip}"), None)
            .json()["identity"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let s = d.admin("GET", "/admin/v1/stats?top=5", None);
    assert_eq!(s.status, 200, "{}", s.body);
    let s = s.json();
    let count = |tier: &str, action: &str| -> u64 {
        s["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["tier"] == tier && x["action"] == action)
            .unwrap_or_else(|| panic!("no {tier}/{action} in {s}"))["count"]
            .as_u64()
            .unwrap()
    };
    let refused = count("anon", "reject");
    assert!(refused >= 10, "{s}");
    assert_eq!(
        count("anon", "allow") + count("anon", "delay") + refused,
        133
    );
    assert_eq!(
        s["tierMix"],
        json!({"anon": 133, "session": 0, "crawler": 0, "agent": 0, "sponsor": 0})
    );
    assert_eq!(s["windowSecs"], 300);
    let top = &s["topByRefusals"];
    assert_eq!(top.as_array().unwrap().len(), 1, "{s}");
    assert_eq!(top[0]["identity"], identity("192.0.2.50"));
    assert_eq!(top[0]["refused"], refused);
    assert_eq!(top[0]["requests"], 130);
    let vol = &s["topByVolume"];
    assert_eq!(vol[0]["identity"], identity("192.0.2.50"));
    assert_eq!(vol[1]["identity"], identity("192.0.2.51"));
    assert_eq!(vol[1]["requests"], 3);
    assert_eq!(s["store"]["degraded"], false);
    assert!(
        s["lockoutsActive"].as_u64().unwrap() >= 1,
        "the burst strike locks: {s}"
    );
    assert_eq!(s["held"]["now"], 0, "{s}");
    // Bad input names the field.
    let r = d.admin("GET", "/admin/v1/stats?top=many", None);
    assert_eq!((r.status, r.json()["field"].clone()), (400, json!("top")));
    let r = d.admin("GET", "/admin/v1/stats?top=0", None);
    assert_eq!((r.status, r.json()["field"].clone()), (422, json!("top")));
    let r = d.admin("GET", "/admin/v1/stats?limit=3", None);
    assert_eq!((r.status, r.json()["field"].clone()), (400, json!("limit")));
}

#[test]
fn in_chromium_the_page_shows_a_lockout_and_a_click_lifts_it() {
    let Some(mut b) = Browser::launch() else {
        return;
    };
    let (_dir, d) = daemon();
    let ip = "203.0.113.9";
    let r = d.admin(
        "POST",
        "/admin/v1/lockouts",
        Some(&json!({"ip": ip, "for": "10m", "reason": "made by the page test"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    // Something for the other panels (and the screenshot): a refused and locked caller.
    traffic(&d, "198.51.100.7", 125);
    // Steady traffic while the page polls, so it has a rate to show.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let steady = {
        let (stop, api) = (std::sync::Arc::clone(&stop), d.api);
        std::thread::spawn(move || {
            let body = json!({"ip": "198.51.100.8", "method": "GET", "path": "/"}).to_string();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                http(
                    api,
                    "POST",
                    "/v1/decide",
                    &[("content-type", "application/json")],
                    Some(body.as_bytes()),
                );
                // Pacing (about 50 a second, not a wait for anything): a rate, not a flood.
                std::thread::park_timeout(std::time::Duration::from_millis(20));
            }
        })
    };

    b.navigate(&format!("http://{}/admin/", d.admin));
    b.wait_for(
        "the token form",
        "document.getElementById('login') && !document.getElementById('login').hidden",
    );
    b.type_into("#token", &d.token());
    b.click("#use-token");
    let button = format!("#lockouts button[data-ip='{ip}']");
    let sel = serde_json::to_string(&button).unwrap();
    b.wait_for(
        "the lockout made through the API",
        &format!("!!document.querySelector({sel})"),
    );
    let row: Value = b.eval(&format!(
        "document.querySelector({sel}).closest('tr').innerText"
    ));
    assert!(
        row.as_str().unwrap().contains("made by the page test"),
        "{row}"
    );
    // The token is kept for this tab only, and the panels filled from the API.
    assert_eq!(
        b.eval("sessionStorage.getItem('limiter-admin-token')"),
        json!(d.token())
    );
    assert_eq!(b.eval("localStorage.length"), json!(0));
    b.wait_for(
        "a decision rate above 0 and the top talkers",
        "Array.from(document.querySelectorAll('#rates tbody td.num')) \
           .some((td) => parseFloat(td.textContent) > 0) && \
         document.querySelectorAll('#top-refusals tbody tr td.id').length > 0",
    );
    assert_eq!(
        b.eval("document.getElementById('store-state').textContent"),
        json!("store ok")
    );
    assert_eq!(
        b.eval("document.getElementById('kernel-state').textContent"),
        json!("kernel detached")
    );
    let png = b.screenshot();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    steady.join().unwrap();
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let shot = std::env::var_os("LIMITER_PAGE_SCREENSHOT").map_or_else(
        || std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("operator-page.png"),
        std::path::PathBuf::from,
    );
    std::fs::write(&shot, &png).unwrap();
    eprintln!("screenshot: {}", shot.display());

    assert!(lockout_ips(&d).contains(&ip.to_string()));
    b.click(&button);
    eventually("the click to lift the lockout in the daemon", || {
        (!lockout_ips(&d).contains(&ip.to_string())).then_some(())
    });
    b.wait_for(
        "the page to drop the lifted lockout",
        &format!("!document.querySelector({sel})"),
    );

    // A wrong token in the tab: the page asks again instead of showing stale data.
    b.eval(
        "sessionStorage.setItem('limiter-admin-token', 'not-the-token'); location.reload(); true",
    );
    b.wait_for(
        "the token form after a refused token",
        "document.getElementById('login') && !document.getElementById('login').hidden && \
         document.getElementById('login-error').textContent.includes('refused')",
    );
}

/// The daemon attached with TC in the server namespace of a veth pair, and the browser in the
/// same namespace (the admin listener is its loopback): the kernel panels show the real
/// program's verdict counters and the lockout the test made, in the lockout map's fill.
#[test]
fn in_chromium_the_page_shows_the_attached_kernels_counters_and_map_fill() {
    let Some(kernel_support::Dataplane {
        pair,
        listener: _listener,
        port,
        pins,
    }) = kernel_support::dataplane("lmp", 2, "limiter-page-")
    else {
        return;
    };
    let netns = vec![
        "nsenter".to_string(),
        format!("--net={}", pair.server.path().display()),
    ];
    let Some(mut b) = pair.server.run(|| Browser::launch_with(&netns)) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let kernel = format!(
        "[kernel]\nmode = \"required\"\nattach = \"tc\"\ninterfaces = [\"{}\"]\npin_path = \"{}\"\n\
         protected_ports = [{port}]\n",
        pair.server_if,
        pins.0.display()
    );
    let env = vec![(
        "LIMITER_EBPF_OBJECT".to_string(),
        limiter_tests::testrun::object_path().display().to_string(),
    )];
    let d = Daemon::start_with(dir.path(), &kernel, "", netns.clone(), env);
    let admin = |method: &str, path: &str, body: Option<Value>| {
        pair.server.run(|| {
            eventually("the admin API in the namespace", || {
                try_admin(&d, method, path, body.as_ref())
            })
        })
    };
    let r = admin(
        "POST",
        "/admin/v1/lockouts",
        Some(json!({"ip": pair.client_ips[1].to_string(), "for": "10m", "reason": "kernel panel"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    // Handshakes through the program: one passes, the locked client's is dropped.
    let short = std::time::Duration::from_millis(300);
    eventually("the free client to connect", || {
        pair.connect_from(pair.client_ips[0], port, short)
            .then_some(())
    });
    assert!(!pair.connect_from(pair.client_ips[1], port, short));
    b.navigate(&format!("http://{}/admin/", d.admin));
    b.wait_for(
        "the token form",
        "document.getElementById('login') && !document.getElementById('login').hidden",
    );
    b.type_into("#token", &d.token());
    b.click("#use-token");
    let pill = b.wait_for(
        "the kernel pill",
        "(() => { const t = document.getElementById('kernel-state').textContent; \
         return t.startsWith('kernel ') && t !== 'kernel …' ? t : null; })()",
    );
    assert_eq!(pill, json!("kernel tc"));
    let lockout_fill = b.wait_for(
        "the lockout map's fill with the lockout in it",
        "(() => { const r = Array.from(document.querySelectorAll('#kernel-maps tbody tr')) \
           .find((tr) => tr.innerText.includes('LIM_LOCKOUT')); \
           return r && /\\b1 \\/ \\d+/.test(r.innerText) ? r.innerText : null; })()",
    );
    assert!(lockout_fill.as_str().unwrap().contains("LIM_LOCKOUT"));
    for verdict in ["pass_syn", "drop_locked"] {
        b.wait_for(
            &format!("the {verdict} counter above 0"),
            &format!(
                "(() => {{ const r = Array.from(document.querySelectorAll('#kernel-counters tbody tr')) \
                   .find((tr) => tr.cells[0].textContent === '{verdict}'); \
                   return !!r && parseInt(r.cells[1].textContent) > 0; }})()"
            ),
        );
    }
    // Traffic between polls, so the screenshot has rates and talkers too.
    let decide = |ip: &str, n: usize| {
        pair.server.run(|| {
            let body = json!({"ip": ip, "method": "GET", "path": "/"}).to_string();
            for _ in 0..n {
                let r = http(
                    d.api,
                    "POST",
                    "/v1/decide",
                    &[("content-type", "application/json")],
                    Some(body.as_bytes()),
                );
                assert_eq!(r.status, 200, "{}", r.body);
            }
        })
    };
    decide("198.51.100.7", 125);
    decide("2001:db8::7", 30);
    eventually("a decision rate on the page", || {
        decide("198.51.100.8", 5);
        b.eval(
            "Array.from(document.querySelectorAll('#rates tbody td.num')) \
               .some((td) => parseFloat(td.textContent) > 0)",
        )
        .as_bool()
        .unwrap()
        .then_some(())
    });
    let png = b.screenshot();
    let shot = std::env::var_os("LIMITER_PAGE_SCREENSHOT_KERNEL").map_or_else(
        || std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("operator-page-kernel.png"),
        std::path::PathBuf::from,
    );
    std::fs::write(&shot, &png).unwrap();
    eprintln!("screenshot: {}", shot.display());
}

/// Config shared by the storm tests: the loopback proxy's `X-Forwarded-For` trusted (the
/// storm arrives through the daemon's own proxy from loopback, as behind a load balancer),
/// Google's range file (one /27) so a real Googlebot is proven, reverse DNS off (no resolver
/// in a test: a claim outside the ranges is then a fake at once), and an IP-to-ASN table
/// naming the storm's two /24s.
fn storm_config(dir: &std::path::Path) -> String {
    let google = dir.join("googlebot.json");
    std::fs::write(
        &google,
        r#"{"creationTime":"2026-12-01","prefixes":[{"ipv4Prefix":"66.249.64.0/27"}]}"#,
    )
    .unwrap();
    let asn = dir.join("asn.tsv");
    std::fs::write(
        &asn,
        "198.51.100.0\t198.51.100.255\t64496\tZZ\tSTORM-A\n203.0.113.0\t203.0.113.255\t64497\tZZ\tSTORM-B\n",
    )
    .unwrap();
    format!(
        "[identity]\ntrusted_proxies = [\"127.0.0.1\"]\n\
         [crawlers]\nrange_files = [{:?}]\nrdns_suffixes = []\n\
         [networks]\nasn_table = {:?}\n",
        google.display().to_string(),
        asn.display().to_string()
    )
}

const GOOGLEBOT: &str = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";

/// `n` GETs through the daemon's proxy from loopback for `client` (its `X-Forwarded-For`)
/// with user agent `ua`.
fn via_proxy(proxy: std::net::SocketAddr, client: &str, ua: &str, n: usize) {
    for _ in 0..n {
        let r = http(
            proxy,
            "GET",
            "/",
            &[("x-forwarded-for", client), ("user-agent", ua)],
            None,
        );
        assert!(
            matches!(r.status, 200 | 429),
            "{client}: {} {}",
            r.status,
            r.body
        );
    }
}

/// Runs `f` in the server namespace when the kernel is attached there, else here.
fn in_ns<T: Send>(dp: Option<&kernel_support::Dataplane>, f: impl FnOnce() -> T + Send) -> T {
    match dp {
        Some(dp) => dp.pair.server.run(f),
        None => f(),
    }
}

/// An admin request with the token, from where the daemon listens (polled: a daemon started
/// in a namespace is only waited for until its token file exists).
fn admin_in(
    dp: Option<&kernel_support::Dataplane>,
    d: &Daemon,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> limiter_tests::client::Resp {
    in_ns(dp, || {
        eventually("the admin API", || {
            try_admin(d, method, path, body.as_ref())
        })
    })
}

/// One admin request with the token, from where this thread is.
fn try_admin(
    d: &Daemon,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Option<limiter_tests::client::Resp> {
    let token = format!("Bearer {}", d.token());
    let body = body.map(Value::to_string);
    let mut headers = vec![("authorization", token.as_str())];
    if body.is_some() {
        headers.push(("content-type", "application/json"));
    }
    limiter_tests::client::try_http(
        d.admin,
        method,
        path,
        &headers,
        body.as_deref().map(str::as_bytes),
    )
}

/// What the kernel's lockout map and deny trie hold, read from the pins
/// (`limiter-daemon kernel list --json`).
fn kernel_list(pins: &std::path::Path) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_limiter-daemon"))
        .args(["kernel", "list", "--json", "--pin-path"])
        .arg(pins)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn kernel_has(list: &Value, kind: &str, field: &str, what: &str) -> bool {
    list[kind]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e[field] == what)
}

/// `n` decisions for `ip` sending user agent `ua` (`/v1/decide`).
fn traffic_as(d: &Daemon, ip: &str, ua: &str, n: usize) {
    let body =
        json!({"ip": ip, "method": "GET", "path": "/", "headers": {"user-agent": ua}}).to_string();
    for _ in 0..n {
        let r = http(
            d.api,
            "POST",
            "/v1/decide",
            &[("content-type", "application/json")],
            Some(body.as_bytes()),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
}

fn row<'a>(list: &'a Value, key: &str, name: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|r| r[key] == name)
        .unwrap_or_else(|| panic!("{name} in {list}"))
}

/// What the page's tables are drawn from, without a browser: each talker's strikes and the
/// lockout in force on it (its own, or a range holding it), the networks by prefix and by ASN
/// with a range's lockout, crawlers by name and proof with the fakes under the name they
/// claim, the agent directories in `/admin/v1/crawlers`; with `show_addresses = false` (a
/// reload) no address or network is named, a lockout's range included, and AS numbers stay.
#[test]
fn stats_give_strikes_lockouts_asns_and_crawlers_by_name_and_hide_addresses_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), "", &storm_config(dir.path()));
    traffic(&d, "198.51.100.10", 125);
    traffic(&d, "198.51.100.11", 2);
    traffic(&d, "203.0.113.5", 2);
    traffic_as(&d, "192.0.2.77", GOOGLEBOT, 3);
    traffic_as(&d, "66.249.64.5", GOOGLEBOT, 2);
    let r = d.admin(
        "POST",
        "/admin/v1/lockouts",
        Some(&json!({"ip": "203.0.113.0/24", "for": "10m", "reason": "a range"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let s = d.admin("GET", "/admin/v1/stats?top=50", None).json();
    let vol = &s["topByVolume"];
    let loud = row(vol, "address", "198.51.100.10");
    assert!(loud["strikes"].as_u64().unwrap() >= 1, "{loud}");
    assert_eq!(loud["lockout"]["ip"], "198.51.100.10", "{loud}");
    assert_eq!(loud["lockout"]["source"], "strikes", "{loud}");
    assert_eq!(loud["lockout"]["level"], 1, "{loud}");
    let quiet = row(vol, "address", "198.51.100.11");
    assert_eq!(
        (&quiet["strikes"], &quiet["lockout"]),
        (&json!(0), &Value::Null)
    );
    let ranged = row(vol, "address", "203.0.113.5");
    assert_eq!(ranged["lockout"]["ip"], "203.0.113.0/24", "{ranged}");
    assert_eq!(ranged["lockout"]["source"], "operator", "{ranged}");
    let nets = &s["topNetworks"];
    let a = row(nets, "network", "198.51.100.0/24");
    assert_eq!(
        (&a["kind"], &a["callers"], &a["lockout"]),
        (&json!("prefix"), &json!(2), &Value::Null)
    );
    assert_eq!(
        row(nets, "network", "203.0.113.0/24")["lockout"]["ip"],
        "203.0.113.0/24"
    );
    let asn = row(nets, "network", "AS64496");
    assert_eq!(
        (&asn["kind"], &asn["callers"], &asn["requests"]),
        (&json!("asn"), &json!(2), &json!(127))
    );
    assert_eq!(row(nets, "network", "AS64497")["callers"], 1);
    let named: Vec<(&str, &str, u64)> = s["crawlers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["proof"].as_str().unwrap(),
                c["requests"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        named,
        [("Googlebot", "fake", 3), ("Googlebot", "ranges", 2)]
    );
    assert_eq!(s["crawlers"][0]["perSecond"], 3.0 / 300.0);
    assert_eq!(s["tierMix"]["crawler"], 2, "{s}");
    let c = d.admin("GET", "/admin/v1/crawlers", None).json();
    assert_eq!(c["rangePrefixes"], 1, "{c}");
    assert_eq!(
        (&c["directories"], &c["directoriesHeld"]),
        (&json!([]), &json!(0)),
        "{c}"
    );

    // Addresses hidden: nothing on the page names an address or a network.
    let text = std::fs::read_to_string(&d.config).unwrap();
    std::fs::write(
        &d.config,
        text.replace("[admin]\n", "[admin]\nshow_addresses = false\n"),
    )
    .unwrap();
    let r = d.admin("POST", "/admin/v1/reload", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let s = d.admin("GET", "/admin/v1/stats?top=50", None).json();
    let body = s.to_string();
    for named in ["198.51.100.", "203.0.113.", "192.0.2.77", "66.249.64."] {
        assert!(!body.contains(named), "{named} in {s}");
    }
    let vol = s["topByVolume"].as_array().unwrap();
    assert!(vol.iter().all(|t| t["address"].is_null()), "{s}");
    assert!(
        vol.iter()
            .any(|t| t["strikes"].as_u64() >= Some(1) && t["lockout"]["level"] == 1),
        "{s}"
    );
    let nets = &s["topNetworks"];
    row(nets, "network", "AS64496");
    assert!(
        nets.as_array()
            .unwrap()
            .iter()
            .filter(|n| n["kind"] == "prefix")
            .all(|n| n["network"].as_str().unwrap().starts_with("net:")),
        "{s}"
    );
}

/// A storm of anonymous callers from two /24s through the proxy (a trusted
/// `X-Forwarded-For` from loopback), a fake Googlebot (Googlebot's user agent from an
/// address outside Google's ranges) and a real one, while the page is open. The daemon's
/// history ring is sampled on a compressed clock (`LIMITER_TEST_HISTORY_TICK_MS`: each 100 ms
/// tick is stamped 5 s after the last, so 30 s of chart takes 0.6 s of wall time). With the
/// kernel attached (daemon and browser in the server namespace of a veth pair; required under
/// `CI=true`) the locks the page makes are read back from the kernel's maps as well.
///
/// The page: the charts span at least 30 s; the storm's addresses are in the top talkers with
/// their strikes and lockouts; both /24s and their ASNs in the networks table; a click locks
/// an address, a /24 and an AS (admin API and kernel), and unlocks them; the fake is listed under
/// the name it claims, the real crawler under its proof. Screenshot to
/// `LIMITER_PAGE_SCREENSHOT` (docs/operator-page.png when refreshed by hand).
#[test]
fn in_chromium_the_page_charts_a_storm_and_acts_on_its_callers_and_networks() {
    let dp = kernel_support::dataplane("lms", 1, "limiter-storm-");
    let dp = dp.as_ref();
    let netns: Vec<String> = dp.map_or_else(Vec::new, |dp| {
        vec![
            "nsenter".to_string(),
            format!("--net={}", dp.pair.server.path().display()),
        ]
    });
    let Some(mut b) = in_ns(dp, || Browser::launch_with(&netns)) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut env = vec![(
        "LIMITER_TEST_HISTORY_TICK_MS".to_string(),
        "100".to_string(),
    )];
    let kernel = dp.map_or(String::new(), |dp| {
        env.push((
            "LIMITER_EBPF_OBJECT".to_string(),
            limiter_tests::testrun::object_path().display().to_string(),
        ));
        format!(
            "[kernel]\nmode = \"required\"\nattach = \"tc\"\ninterfaces = [\"{}\"]\npin_path = \"{}\"\n\
             protected_ports = [{}]\n",
            dp.pair.server_if,
            dp.pins.0.display(),
            dp.port
        )
    });
    let extra = storm_config(dir.path());
    // Started from the namespace, so the upstream it proxies to listens there too.
    let d = in_ns(dp, || {
        Daemon::start_with(dir.path(), &kernel, &extra, netns.clone(), env)
    });
    if dp.is_some() {
        let k = admin_in(dp, &d, "GET", "/admin/v1/kernel", None).json();
        assert_eq!(k["attached"], true, "{k}");
    }
    // The storm: 12 callers in each of two /24s, the first of each past the anonymous burst;
    // a fake Googlebot, and a real one from Google's range.
    let storm: Vec<String> = ["198.51.100", "203.0.113"]
        .iter()
        .flat_map(|net| (10..22).map(move |h| format!("{net}.{h}")))
        .collect();
    let fake = "192.0.2.77";
    let real = "66.249.64.5";
    let proxy = d.proxy;
    let storm_once = |first: usize, rest: usize| {
        in_ns(dp, || {
            for ip in &storm {
                let n = if ip.ends_with(".10") { first } else { rest };
                via_proxy(proxy, ip, "storm/1.0", n);
            }
            // Fewer than any storm caller: the page lists the top 25 by volume, and the
            // storm's 24 must all be among them whatever order the hashes break ties in.
            via_proxy(proxy, fake, GOOGLEBOT, 2);
            via_proxy(proxy, real, GOOGLEBOT, 2);
        });
    };
    storm_once(125, 5);
    // The API holds the ring too: points a step apart, rates by action.
    let h = eventually("seven samples in the ring", || {
        let h = admin_in(dp, &d, "GET", "/admin/v1/history", None).json();
        (h["points"].as_array().unwrap().len() >= 7).then_some(h)
    });
    assert_eq!(h["stepSecs"], 5, "{h}");
    assert_eq!(h["maxPoints"], 180, "{h}");
    let pts = h["points"].as_array().unwrap();
    assert_eq!(
        pts[1]["atMs"].as_u64().unwrap() - pts[0]["atMs"].as_u64().unwrap(),
        5000
    );
    // The stats behind the tables: the burst's strike and lockout on the storm's loudest
    // address, its ASN beside its /24, the fake under the name it claims.
    let s = admin_in(dp, &d, "GET", "/admin/v1/stats?top=50", None).json();
    let loud = s["topByVolume"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["address"] == "198.51.100.10")
        .unwrap_or_else(|| panic!("198.51.100.10 in {s}"));
    assert!(loud["strikes"].as_u64().unwrap() >= 1, "{loud}");
    assert_eq!(loud["lockout"]["ip"], "198.51.100.10", "{loud}");
    assert_eq!(loud["lockout"]["source"], "strikes", "{loud}");
    let nets: Vec<&str> = s["topNetworks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["network"].as_str().unwrap())
        .collect();
    for net in ["198.51.100.0/24", "203.0.113.0/24", "AS64496", "AS64497"] {
        assert!(nets.contains(&net), "{net} in {nets:?}");
    }
    let named: Vec<(&str, &str)> = s["crawlers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["proof"].as_str().unwrap()))
        .collect();
    assert!(named.contains(&("Googlebot", "fake")), "{named:?}");
    assert!(named.contains(&("Googlebot", "ranges")), "{named:?}");

    b.navigate(&format!("http://{}/admin/", d.admin));
    b.wait_for(
        "the token form",
        "document.getElementById('login') && !document.getElementById('login').hidden",
    );
    b.type_into("#token", &d.token());
    b.click("#use-token");
    // More storm while the page polls, so the lines rise inside the window drawn.
    storm_once(3, 3);
    let span = b.wait_for(
        "the decisions chart to span 30 s with allow and reject drawn",
        "(() => { const s = document.getElementById('chart-decisions'); \
           const span = s.dataset.lastMs - s.dataset.firstMs; \
           const lines = Array.from(s.querySelectorAll('polyline')).map((l) => l.dataset.series); \
           return span >= 30000 && parseInt(s.dataset.points) >= 7 && \
             lines.includes('allow') && lines.includes('reject') ? span : null; })()",
    );
    assert!(span.as_f64().unwrap() >= 30000.0, "{span}");
    b.wait_for(
        "the storm's burst refusals on the refusals chart",
        "Array.from(document.querySelectorAll('#chart-refusals polyline')) \
           .some((l) => l.dataset.series === 'burst')",
    );
    b.wait_for(
        "the held chart drawn",
        "!!document.querySelector('#chart-held polyline')",
    );
    // Callers by address: the storm's addresses in the talker table, the loudest with its
    // strike and the lockout it earned.
    for ip in [
        "198.51.100.10",
        "203.0.113.10",
        "198.51.100.11",
        "203.0.113.21",
    ] {
        b.wait_for(
            &format!("{ip} in the top talkers"),
            &format!(
                "Array.from(document.querySelectorAll('#top-volume tbody td.id')) \
                   .some((td) => td.textContent === '{ip}')"
            ),
        );
    }
    let row = b.wait_for(
        "the loudest address's strikes and lockout",
        "(() => { const r = Array.from(document.querySelectorAll('#top-volume tbody tr')) \
           .find((tr) => tr.cells[0].textContent === '198.51.100.10'); \
           return r && parseInt(r.cells[5].textContent) >= 1 && \
             r.cells[6].textContent.startsWith('locked') ? r.innerText : null; })()",
    );
    assert!(row.as_str().unwrap().contains("strikes"), "{row}");
    // Why it was refused, and how long it is locked for, as an operator reads them.
    let why = b.eval(
        "(() => { const r = Array.from(document.querySelectorAll('#top-volume tbody tr')) \
           .find((tr) => tr.cells[0].textContent === '198.51.100.10'); \
           return [r.cells[4].textContent, r.cells[6].textContent]; })()",
    );
    // Its burst earned the lockout, and a locked caller's requests are refused `locked`.
    assert!(
        ["burst", "locked"].contains(&why[0].as_str().unwrap()),
        "{why}"
    );
    let left = why[1].as_str().unwrap();
    assert!(
        regex_like_duration(left.trim_start_matches("locked ")),
        "a duration like 59s or 9m58s: {left}"
    );
    // On a 1440x900 screen the callers table is above the fold: its head and first rows show
    // without scrolling.
    b.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 1440, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
    );
    let bottom = b.eval(
        "(() => { const rows = document.querySelectorAll('#top-volume tbody tr'); \
           return rows[Math.min(2, rows.length - 1)].getBoundingClientRect().bottom; })()",
    );
    assert!(
        bottom.as_f64().unwrap() < 900.0,
        "the callers' first rows end at {bottom} px, below the fold"
    );
    b.call("Emulation.clearDeviceMetricsOverride", json!({}));
    // Networks: both /24s with their 12 callers, and the ASNs they belong to.
    for net in ["198.51.100.0/24", "203.0.113.0/24", "AS64496", "AS64497"] {
        let row = b.wait_for(
            &format!("{net} in the networks table"),
            &format!(
                "(() => {{ const r = Array.from(document.querySelectorAll('#top-networks tbody tr')) \
                   .find((tr) => tr.cells[0].textContent === '{net}'); \
                   return r ? r.innerText : null; }})()"
            ),
        );
        assert!(row.as_str().unwrap().contains("12"), "12 callers: {row}");
    }
    // Crawlers and agents: the fake under the name it claims, the real one by its proof.
    b.wait_for(
        "the fake Googlebot under its claimed name",
        "Array.from(document.querySelectorAll('#fakes tbody tr')) \
           .some((tr) => tr.cells[0].textContent === 'Googlebot' && parseInt(tr.cells[2].textContent) > 0)",
    );
    b.wait_for(
        "the real Googlebot proven by its range",
        "Array.from(document.querySelectorAll('#crawlers tbody tr')) \
           .some((tr) => tr.cells[0].textContent === 'Googlebot' && tr.cells[1].textContent === 'ranges')",
    );
    b.wait_for(
        "the range prefixes in force",
        "document.getElementById('range-prefixes').textContent.includes('1 crawler prefixes')",
    );

    // A click on a row's lock button locks that address (for the duration chosen).
    let target = "203.0.113.15";
    let lockout_of = |ip: &str| {
        admin_in(dp, &d, "GET", "/admin/v1/lockouts", None).json()["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["ip"] == ip)
            .cloned()
    };
    assert!(lockout_of(target).is_none());
    b.eval("document.getElementById('lock-for').value = '10m'; true");
    confirm_click(
        &mut b,
        &format!("#top-volume button.lock[data-ip='{target}']"),
    );
    let lock = eventually("the click to lock the address in the daemon", || {
        lockout_of(target)
    });
    assert_eq!(lock["reason"], "locked from the operator page", "{lock}");
    let left = lock["remainingSecs"].as_u64().unwrap();
    assert!((500..=600).contains(&left), "10 minutes chosen: {lock}");
    if let Some(dp) = dp {
        eventually(&format!("{target} in the kernel's lockout map"), || {
            kernel_has(&kernel_list(&dp.pins.0), "lockouts", "ip", target).then_some(())
        });
    }
    // The row now offers an unlock, which lifts it.
    b.wait_for(
        "an unlock button on the locked row",
        &format!("!!document.querySelector(\"#top-volume button.lift[data-ip='{target}']\")"),
    );
    // A network row's lock locks the /24 (the deny trie, with its deadline).
    let net = "203.0.113.0/24";
    confirm_click(
        &mut b,
        &format!("#top-networks button.lock[data-ip='{net}']"),
    );
    let lock = eventually("the click to lock the network in the daemon", || {
        lockout_of(net)
    });
    assert_eq!(lock["source"], "operator", "{lock}");
    if let Some(dp) = dp {
        eventually(&format!("{net} in the kernel's deny trie"), || {
            kernel_has(&kernel_list(&dp.pins.0), "deny", "cidr", net).then_some(())
        });
    }
    b.wait_for(
        "an unlock button on the locked network",
        &format!("!!document.querySelector(\"#top-networks button.lift[data-ip='{net}']\")"),
    );
    // An ASN row's lock locks the AS's ranges from the table (here its one /24), named by it.
    let as_net = "198.51.100.0/24";
    confirm_click(&mut b, "#top-networks button.lock[data-ip='AS64496']");
    let lock = eventually("the click to lock the AS in the daemon", || {
        lockout_of(as_net)
    });
    assert_eq!(
        lock["reason"], "AS64496: locked from the operator page",
        "{lock}"
    );
    if let Some(dp) = dp {
        eventually(&format!("{as_net} in the kernel's deny trie"), || {
            kernel_has(&kernel_list(&dp.pins.0), "deny", "cidr", as_net).then_some(())
        });
    }
    b.wait_for(
        "an unlock button on the locked AS",
        "!!document.querySelector(\"#top-networks button.lift[data-ip='AS64496']\")",
    );
    let png = b.screenshot();
    b.click("#top-networks button.lift[data-ip='AS64496']");
    eventually("the unlock click to lift the AS", || {
        lockout_of(as_net).is_none().then_some(())
    });
    b.click(&format!("#top-networks button.lift[data-ip='{net}']"));
    eventually("the unlock click to lift the network", || {
        lockout_of(net).is_none().then_some(())
    });
    b.wait_for(
        "the address's unlock button after the network's lift",
        &format!("!!document.querySelector(\"#top-volume button.lift[data-ip='{target}']\")"),
    );
    b.click(&format!("#top-volume button.lift[data-ip='{target}']"));
    eventually("the unlock click to lift the address", || {
        lockout_of(target).is_none().then_some(())
    });
    if let Some(dp) = dp {
        eventually("both lifted in the kernel", || {
            let k = kernel_list(&dp.pins.0);
            (!kernel_has(&k, "lockouts", "ip", target)
                && !kernel_has(&k, "deny", "cidr", net)
                && !kernel_has(&k, "deny", "cidr", as_net))
            .then_some(())
        });
    }
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let shot = std::env::var_os("LIMITER_PAGE_SCREENSHOT").map_or_else(
        || std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("operator-page-storm.png"),
        std::path::PathBuf::from,
    );
    std::fs::write(&shot, &png).unwrap();
    eprintln!("screenshot: {}", shot.display());
}

/// A lock from the page: the first click arms the button ("Lock 10 min?"), the second locks,
/// as `limiterctl top` asks `y`.
fn confirm_click(b: &mut limiter_tests::browser::Browser, selector: &str) {
    b.click(selector);
    let armed = b.wait_for(
        "the lock button to ask for a second click",
        &format!(
            "(() => {{ const e = document.querySelector(\"{selector}\"); \
               return e && e.textContent.endsWith('?') ? e.textContent : null; }})()"
        ),
    );
    assert!(armed.as_str().unwrap().starts_with("Lock "), "{armed}");
    b.click(selector);
}

/// `45s`, `9m58s`, `1h0m`, `2d3h`: a duration as the page writes it, never raw seconds.
fn regex_like_duration(text: &str) -> bool {
    let head = text.split(' ').next().unwrap_or("");
    let units: String = head.chars().filter(|c| c.is_ascii_alphabetic()).collect();
    let digits_ok = head.chars().all(|c| c.is_ascii_alphanumeric()) && !head.is_empty();
    digits_ok && ["s", "ms", "hm", "dh"].contains(&units.as_str())
}
