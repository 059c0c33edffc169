//! The operator page (`GET /admin/`) and the stats it polls, against the real daemon binary:
//! the page is served without the token and loads nothing from elsewhere, `/admin/v1/stats`
//! reports decisions, top talkers and tier mix from real traffic, and in a real headless
//! Chromium the page asks for the token, shows a lockout this test made through the API, and
//! lifting it with a click removes it (checked through the API); with the real kernel program
//! attached (daemon and browser in the server namespace of a veth pair), the page shows the
//! verdict counters and the lockout map's fill, the lockout in it.

mod admin_support;
mod browser_support;
#[allow(
    dead_code,
    reason = "this test starts the daemon binary, not an in-process dataplane"
)]
mod kernel_support;

use admin_support::{eventually, http, Daemon};
use browser_support::Browser;
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
                let token = format!("Bearer {}", d.token());
                let body = body.as_ref().map(Value::to_string);
                let mut headers = vec![("authorization", token.as_str())];
                if body.is_some() {
                    headers.push(("content-type", "application/json"));
                }
                admin_support::try_http(
                    d.admin,
                    method,
                    path,
                    &headers,
                    body.as_deref().map(str::as_bytes),
                )
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

/// A storm of anonymous callers from two /24s while the page is open, the daemon's history
/// ring sampled on a compressed clock (`LIMITER_TEST_HISTORY_TICK_MS`: each 100 ms tick is
/// stamped 5 s after the last, so 30 s of chart takes 0.6 s of wall time): the charts draw
/// points spanning at least 30 s, decisions and the storm's refusals among them. Screenshot to
/// `LIMITER_PAGE_SCREENSHOT` (docs/operator-page.png when refreshed by hand).
#[test]
fn in_chromium_the_page_charts_a_storm_over_time() {
    let Some(mut b) = Browser::launch() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let env = vec![(
        "LIMITER_TEST_HISTORY_TICK_MS".to_string(),
        "100".to_string(),
    )];
    let d = Daemon::start_with(dir.path(), "", "", Vec::new(), env);
    // The storm: 12 callers in each of two /24s, the first of each past the anonymous burst.
    let storm: Vec<String> = ["198.51.100", "203.0.113"]
        .iter()
        .flat_map(|net| (10..22).map(move |h| format!("{net}.{h}")))
        .collect();
    for ip in &storm {
        let n = if ip.ends_with(".10") { 125 } else { 5 };
        traffic(&d, ip, n);
    }
    // The API holds the ring too: points a step apart, rates by action.
    let h = eventually("seven samples in the ring", || {
        let h = d.admin("GET", "/admin/v1/history", None).json();
        (h["points"].as_array().unwrap().len() >= 7).then_some(h)
    });
    assert_eq!(h["stepSecs"], 5, "{h}");
    assert_eq!(h["maxPoints"], 180, "{h}");
    let pts = h["points"].as_array().unwrap();
    assert_eq!(
        pts[1]["atMs"].as_u64().unwrap() - pts[0]["atMs"].as_u64().unwrap(),
        5000
    );
    b.navigate(&format!("http://{}/admin/", d.admin));
    b.wait_for(
        "the token form",
        "document.getElementById('login') && !document.getElementById('login').hidden",
    );
    b.type_into("#token", &d.token());
    b.click("#use-token");
    // More storm while the page polls, so the lines rise inside the window drawn.
    for ip in &storm {
        traffic(&d, ip, 3);
    }
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
    // Callers by address: the storm's addresses in the talker table, both /24s in the
    // networks table.
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
    for net in ["198.51.100.0/24", "203.0.113.0/24"] {
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
    // A click on a row's lock button locks that address (for the duration chosen).
    let target = "203.0.113.15";
    assert!(!lockout_ips(&d).contains(&target.to_string()));
    b.eval("document.getElementById('lock-for').value = '10m'; true");
    b.click(&format!("#top-volume button.lock[data-ip='{target}']"));
    let lock = eventually("the click to lock the address in the daemon", || {
        let r = d.admin("GET", "/admin/v1/lockouts", None).json();
        r["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["ip"] == target)
            .cloned()
    });
    assert_eq!(lock["reason"], "locked from the operator page", "{lock}");
    let left = lock["remainingSecs"].as_u64().unwrap();
    assert!((500..=600).contains(&left), "10 minutes chosen: {lock}");
    // The row now offers an unlock, which lifts it.
    b.wait_for(
        "an unlock button on the locked row",
        &format!("!!document.querySelector(\"#top-volume button.lift[data-ip='{target}']\")"),
    );
    let png = b.screenshot();
    b.click(&format!("#top-volume button.lift[data-ip='{target}']"));
    eventually("the unlock click to lift the address", || {
        (!lockout_ips(&d).contains(&target.to_string())).then_some(())
    });
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let shot = std::env::var_os("LIMITER_PAGE_SCREENSHOT").map_or_else(
        || std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("operator-page-storm.png"),
        std::path::PathBuf::from,
    );
    std::fs::write(&shot, &png).unwrap();
    eprintln!("screenshot: {}", shot.display());
}
