//! Config reload on SIGHUP against the real daemon binary: a changed burst applies without a
//! restart and the counts already made are kept; a broken file and a listener change are
//! refused (the field and line, "needs a restart") while the old limits keep being enforced
//! and the daemon keeps running; the metrics count both results and show the file's hash.

use limiter_tests::client::decide;
use limiter_tests::client::metrics;
use limiter_tests::client::Resp;
use limiter_tests::daemon::config_text;
use limiter_tests::daemon::Daemon;
use limiter_tests::free_addr;
use sha2::{Digest, Sha256};

fn burst(
    api: std::net::SocketAddr,
    metrics: std::net::SocketAddr,
    dir: &std::path::Path,
    n: u32,
) -> String {
    config_text(
        dir,
        &format!(
            "[tiers.anon]\nburst = {n}\n[admin]\nlisten = \"\"\n[http]\napi_listen = [\"{api}\"]\n[metrics]\nlisten = \"{metrics}\"\n"
        ),
    )
}

fn remaining(a: &Resp) -> String {
    let v = a.json();
    format!(
        "{} {}",
        v["action"].as_str().unwrap(),
        v["headers"]["x-ratelimit-remaining"]
            .as_str()
            .unwrap_or("-")
    )
}

fn sha(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

#[test]
fn sighup_applies_a_new_burst_keeps_counts_and_refuses_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let (api, m) = (free_addr(), free_addr());
    let first = burst(api, m, dir.path(), 10);
    let mut d = Daemon::run(dir.path(), &first, &[], api);
    assert!(metrics(m).contains(&format!("config_info{{sha256=\"{}\"}} 1", sha(&first))));

    let ip = "203.0.113.9";
    for left in [9, 8, 7] {
        assert_eq!(
            remaining(&decide(api, ip, "/a", None)),
            format!("allow {left}")
        );
    }

    // Burst 10 → 4: the three counted stay, so the fourth request is the last one.
    let second = burst(api, m, dir.path(), 4);
    d.rewrite(&second);
    d.signal(libc::SIGHUP);
    let log = d.wait_log("config reload applied", 1);
    assert!(log.contains("tiers.anon.burst: 10 -> 4"), "{log}");
    assert_eq!(remaining(&decide(api, ip, "/a", None)), "allow 0");
    assert_eq!(remaining(&decide(api, ip, "/a", None)), "reject 0");
    let text = metrics(m);
    assert!(
        text.contains("config_reloads_total{result=\"applied\"} 1"),
        "{text}"
    );
    assert!(
        text.contains(&format!("config_info{{sha256=\"{}\"}} 1", sha(&second))),
        "{text}"
    );

    // A broken file: refused with its field and line, the daemon runs on at burst 4.
    let broken = second.replace("burst = 4", "burst = 0");
    let line = broken.lines().position(|l| l == "burst = 0").unwrap() + 1;
    d.rewrite(&broken);
    d.signal(libc::SIGHUP);
    let log = d.wait_log("config reload refused", 1);
    let refused = log
        .lines()
        .find(|l| l.contains("config reload refused"))
        .unwrap();
    assert!(refused.contains("tiers.anon.burst"), "{refused}");
    assert!(refused.contains(&format!("line {line}")), "{refused}");
    assert!(d.running());
    let other = "203.0.113.10";
    for left in [3, 2, 1, 0] {
        assert_eq!(
            remaining(&decide(api, other, "/a", None)),
            format!("allow {left}")
        );
    }
    assert_eq!(remaining(&decide(api, other, "/a", None)), "reject 0");

    // A listener change: refused as needing a restart; the old listener still answers.
    let moved = second.replace(&api.to_string(), &free_addr().to_string());
    d.rewrite(&moved);
    d.signal(libc::SIGHUP);
    let log = d.wait_log("config reload refused", 2);
    let refused = log
        .lines()
        .filter(|l| l.contains("config reload refused"))
        .nth(1)
        .unwrap();
    assert!(
        refused.contains("http.api_listen") && refused.contains("needs a restart"),
        "{refused}"
    );
    assert_eq!(
        remaining(&decide(api, "203.0.113.11", "/a", None)),
        "allow 3"
    );
    let text = metrics(m);
    assert!(
        text.contains("config_reloads_total{result=\"refused\"} 2"),
        "{text}"
    );
    // The hash is still the file in force, not the refused one.
    assert!(
        text.contains(&format!("config_info{{sha256=\"{}\"}} 1", sha(&second))),
        "{text}"
    );
    // An optional field: its values read as an operator writes them, no Rust syntax.
    let threads = second.replace("[http]\n", "[http]\nworker_threads = 2\n");
    d.rewrite(&threads);
    d.signal(libc::SIGHUP);
    let log = d.wait_log("config reload refused", 3);
    let refused = log
        .lines()
        .filter(|l| l.contains("config reload refused"))
        .nth(2)
        .unwrap();
    assert!(refused.contains("http.worker_threads"), "{refused}");
    assert!(refused.contains("(unset) to 2"), "{refused}");
    for rust in ["Some(", "None"] {
        assert!(!log.contains(rust), "{rust} in the daemon's log:\n{log}");
    }
    assert!(d.running(), "{}", d.logs());
}
