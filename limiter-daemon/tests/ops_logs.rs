//! Logs from the real daemon binary: with `--log-format json` (or `[log] format = "json"`)
//! every stderr line is a JSON object, and the operator events are there as lines with an
//! `event` field: a lockout made, a reload applied, a reload refused. The flag wins over the
//! file.

mod ops_support;

use ops_support::*;

fn config(dir: &std::path::Path, api: std::net::SocketAddr, burst: u32, log: &str) -> String {
    config_text(
        dir,
        &format!(
            "[tiers.anon]\nburst = {burst}\n[admin]\nlisten = \"\"\n[http]\napi_listen = [\"{api}\"]\n[metrics]\nlisten = \"\"\n{log}"
        ),
    )
}

fn json_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}\n{log}")))
        .collect()
}

fn events(lines: &[serde_json::Value]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l["fields"]["event"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn json_logs_parse_line_by_line_and_carry_the_operator_events() {
    let dir = tempfile::tempdir().unwrap();
    let api = free_addr();
    let mut d = Daemon::start(
        dir.path(),
        &config(dir.path(), api, 3, ""),
        &["--log-format", "json"],
        api,
    );
    // A burst refused: a strike, a lockout.
    for _ in 0..4 {
        decide(api, "203.0.113.77", "/x", None);
    }
    d.rewrite(&config(dir.path(), api, 5, ""));
    d.signal(libc::SIGHUP);
    d.wait_log("config reload applied", 1);
    d.rewrite("[tiers.anon]\nburst = \"many\"\n");
    d.signal(libc::SIGHUP);
    d.wait_log("config reload refused", 1);
    d.signal(libc::SIGTERM);
    let status = eventually("the daemon's exit", || d.child.try_wait().unwrap());
    assert!(status.success(), "{status}");

    let log = d.log();
    let lines = json_lines(&log);
    assert!(lines.len() > 5, "{log}");
    let ev = events(&lines);
    for want in ["lockout_made", "reload_applied", "reload_refused"] {
        assert!(ev.iter().any(|e| e == want), "no {want} in {ev:?}:\n{log}");
    }
    let lockout = lines
        .iter()
        .find(|l| l["fields"]["event"] == "lockout_made")
        .unwrap();
    assert_eq!(lockout["fields"]["ip"], "203.0.113.77");
    assert_eq!(lockout["level"], "INFO");
    let refused = lines
        .iter()
        .find(|l| l["fields"]["event"] == "reload_refused")
        .unwrap();
    assert!(
        refused["fields"]["error"]
            .as_str()
            .unwrap()
            .contains("line 2"),
        "{refused}"
    );
}

#[test]
fn the_config_sets_json_and_the_flag_wins() {
    let dir = tempfile::tempdir().unwrap();
    let api = free_addr();
    let text = config(dir.path(), api, 3, "[log]\nformat = \"json\"\n");
    {
        let mut d = Daemon::start(dir.path(), &text, &[], api);
        d.signal(libc::SIGTERM);
        eventually("the daemon's exit", || d.child.try_wait().unwrap());
        assert!(json_lines(&d.log()).len() >= 2, "{}", d.log());
    }
    let mut d = Daemon::start(dir.path(), &text, &["--log-format", "text"], api);
    d.signal(libc::SIGTERM);
    eventually("the daemon's exit", || d.child.try_wait().unwrap());
    let log = d.log();
    assert!(!log.is_empty());
    assert!(
        log.lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_err()),
        "{log}"
    );
}
