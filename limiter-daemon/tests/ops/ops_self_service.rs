//! The self-service endpoint against the real daemon binary, on both proxy paths (the own
//! HTTP/1.1 loop and hyper's server, `max_header_count = 128`, more fields than the loop parses): its figures are those of the
//! caller's last decision and its next decision's fields say one less; it is never forwarded
//! (the upstream sees nothing of it) and never counted (a thousand calls leave the budget as
//! it was); both paths answer alike; `self_service_path = ""` turns it off.

use std::net::SocketAddr;

use limiter_tests::client::ratelimit_field;
use limiter_tests::client::request;
use limiter_tests::daemon::config_text;
use limiter_tests::daemon::Daemon;
use limiter_tests::free_addr;
use limiter_tests::upstream::Upstream;

const PATH: &str = "/.well-known/rate-limits";

fn start(
    dir: &std::path::Path,
    up: &Upstream,
    own_loop: bool,
    extra: &str,
) -> (Daemon, SocketAddr) {
    // More fields than the own loop parses: every request takes hyper's server.
    let hyper_only = if own_loop {
        ""
    } else {
        "max_header_count = 128\n"
    };
    let proxy = free_addr();
    let text = config_text(
        dir,
        &format!(
            "[tiers.anon]\nburst = 50\n[admin]\nlisten = \"\"\n[http]\nproxy_listen = [\"{proxy}\"]\nupstream = \"http://{}\"\n\
             {hyper_only}{extra}[metrics]\nlisten = \"\"\n",
            up.addr
        ),
    );
    (Daemon::run(dir, &text, &[], proxy), proxy)
}

/// Runs the scenario on one proxy path; returns the self-service document it answered.
fn scenario(own_loop: bool) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let up = Upstream::start();
    let (_d, proxy) = start(dir.path(), &up, own_loop, "");

    let first = request(proxy, "GET", "/page", &[], "");
    assert_eq!(first.status, 200, "{first:?}");
    let last = ratelimit_field(first.field("ratelimit"));

    let s = request(proxy, "GET", PATH, &[], "");
    assert_eq!(s.status, 200, "{s:?}");
    assert_eq!(s.field("content-type"), "application/json");
    assert_eq!(s.field("cache-control"), "no-store");
    let doc = s.json();
    assert_eq!(doc["tier"], "anon");
    assert_eq!(doc["next"], "allow");
    assert!(doc["lockout"].is_null());
    assert!(
        doc["upgrade"].as_str().is_some_and(|u| !u.is_empty()),
        "{doc}"
    );
    let windows = doc["windows"].as_array().unwrap();
    assert_eq!(windows.len(), last.len(), "{doc}");
    // The figures are the last decision's: same windows, limits, remaining; resets agree
    // within the second that may have passed.
    for (w, (name, r, t)) in windows.iter().zip(&last) {
        assert_eq!(w["name"], name.as_str());
        assert_eq!(w["remaining"], *r, "{doc}");
        let reset = w["resetSecs"].as_u64().unwrap();
        assert!(reset <= *t && reset + 1 >= *t, "{name}: {reset} vs {t}");
    }
    assert_eq!(windows[0]["limit"], 50);

    // Not counted: a thousand calls later the budget is the same.
    for _ in 0..1000 {
        assert_eq!(request(proxy, "GET", PATH, &[], "").status, 200);
    }
    assert_eq!(request(proxy, "HEAD", PATH, &[], "").status, 200);
    let post = request(proxy, "POST", PATH, &[], "{}");
    assert_eq!(post.status, 405, "{post:?}");
    assert_eq!(post.field("allow"), "GET, HEAD");
    let again = request(proxy, "GET", PATH, &[], "").json();
    let left = |v: &serde_json::Value| -> Vec<u64> {
        v["windows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["remaining"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(left(&again), left(&doc), "a call counted");

    // The next decision's fields: one request less in every window.
    let next = request(proxy, "GET", "/page", &[], "");
    for (w, (name, r, _)) in windows.iter().zip(ratelimit_field(next.field("ratelimit"))) {
        assert_eq!(w["name"], name.as_str());
        assert_eq!(w["remaining"].as_u64().unwrap() - 1, r, "{name}");
    }
    assert_eq!(
        next.field("x-ratelimit-remaining").parse::<u64>().unwrap(),
        windows
            .iter()
            .map(|w| w["remaining"].as_u64().unwrap())
            .min()
            .unwrap()
            - 1
    );
    // Never forwarded: the upstream saw the two pages only.
    assert_eq!(up.targets(), ["/page", "/page"]);
    doc
}

#[test]
fn self_service_is_answered_alike_on_both_paths_never_forwarded_never_counted() {
    let own = scenario(true);
    let hyper = scenario(false);
    let strip = |mut v: serde_json::Value| {
        for w in v["windows"].as_array_mut().unwrap() {
            w["resetSecs"] = serde_json::Value::Null;
        }
        v
    };
    assert_eq!(strip(own), strip(hyper));
}

#[test]
fn an_empty_path_turns_it_off() {
    let dir = tempfile::tempdir().unwrap();
    let up = Upstream::start();
    let (_d, proxy) = start(dir.path(), &up, true, "self_service_path = \"\"\n");
    let a = request(proxy, "GET", PATH, &[], "");
    assert_eq!(a.status, 200);
    assert_eq!(a.body, "ok");
    // Forwarded and counted like any other path.
    assert_eq!(a.field("x-ratelimit-remaining"), "49");
    assert_eq!(up.targets(), [PATH]);
}
