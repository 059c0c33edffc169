//! `examples/grafana/limiter.json` and `examples/prometheus/alerts.yml` cannot rot: the rules
//! pass `promtool check rules` and their unit tests (`alerts_test.yml`: each fires past its
//! threshold and not below it), the dashboard has the panels the operator needs, and every
//! metric name either file uses is one the real daemon exports, checked against a scrape of
//! `/metrics` from the binary running with the kernel dataplane attached (so the kernel series
//! exist) after traffic that made a strike lockout (so the per-level family has a series); that
//! scrape in the classic text format passes `promtool check metrics`.
//! Needs promtool (Debian's prometheus package), root and the built eBPF object: skipped
//! outside CI without them, a failure under `CI=true`.

#[allow(
    dead_code,
    reason = "this test starts the daemon binary, not an in-process dataplane"
)]
use crate::kernel_support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use limiter_tests::client::http;
use limiter_tests::client::try_http;
use limiter_tests::eventually;
use limiter_tests::testrun::object_path;
use serde_json::{json, Value};

fn example(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(example(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn run_promtool(bin: &Path, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .current_dir(example("prometheus"))
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}: {text}");
    text
}

#[test]
fn alert_rules_pass_promtool_and_their_unit_tests() {
    let bin = limiter_tests::promtool::binary();
    if !limiter_tests::require(bin.is_some(), "promtool (apt-get install prometheus)") {
        return;
    }
    let bin = bin.unwrap();
    let out = run_promtool(&bin, &["check", "rules", "alerts.yml"]);
    assert!(out.contains("SUCCESS: 5 rules found"), "{out}");
    let out = run_promtool(&bin, &["test", "rules", "alerts_test.yml"]);
    assert!(out.contains("SUCCESS"), "{out}");
    // The quota doc's three rules, as it writes them.
    let rules = read("prometheus/alerts.yml");
    for expr in [
        "expr: increase(limiter_quota_soft_hits_total[5m]) > 50",
        "expr: rate(limiter_quota_hard_hits_total[1h]) > 0.1",
        "expr: histogram_quantile(0.95, sum by (le) (rate(limiter_request_delay_seconds_bucket[5m]))) >= 1",
        "expr: limiter_store_degraded == 1",
        "expr: limiter_kernel_attached == 0",
    ] {
        assert!(rules.contains(expr), "alerts.yml lacks `{expr}`");
    }
}

/// Every `expr` in the dashboard, with its panel's title.
fn dashboard_exprs(dash: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((
                p["title"].as_str().unwrap().to_string(),
                t["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    out
}

#[test]
fn the_dashboard_charts_what_the_operator_needs() {
    let dash: Value = serde_json::from_str(&read("grafana/limiter.json")).unwrap();
    assert_eq!(dash["uid"], "limiter-daemon");
    let exprs = dashboard_exprs(&dash);
    let charted = |needle: &str| exprs.iter().any(|(_, e)| e.contains(needle));
    for needle in [
        "sum by (tier, action) (rate(limiter_decisions_total",
        "sum by (tier, reason) (rate(limiter_decisions_total",
        "limiter_quota_soft_hits_total",
        "limiter_quota_hard_hits_total",
        "histogram_quantile(0.95, sum by (le) (rate(limiter_request_delay_seconds_bucket",
        "limiter_lockouts_active",
        "limiter_lockouts_total",
        "limiter_kernel_verdicts_total{instance=~\"$instance\", verdict=~\"drop_.*\"}",
        "limiter_store_degraded",
        "limiter_kernel_attached",
    ] {
        assert!(charted(needle), "no panel charts `{needle}`");
    }
    // Every query goes to the dashboard's data source variable, so it imports anywhere.
    for p in dash["panels"].as_array().unwrap() {
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        }
    }
}

/// Metric names in `text`: words starting with `limiter_`.
fn metric_names(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("limiter_") && w.len() > "limiter_".len())
        .map(str::to_string)
        .collect()
}

/// Sample names in an OpenMetrics scrape (histograms as their `_bucket`, `_sum`, `_count`).
fn scraped_names(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect()
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        limiter_tests::process::terminate(&mut self.0, Duration::from_secs(5));
    }
}

#[test]
fn every_metric_the_dashboard_and_rules_name_is_exported_by_the_daemon() {
    let Some(kernel_support::Dataplane {
        pair,
        listener: _listener,
        port,
        pins,
    }) = kernel_support::dataplane("lmd", 2, "limiter-dash-")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Inside the server namespace: its loopback is empty, so fixed ports are free.
    let (metrics, api): (SocketAddr, SocketAddr) = (
        "127.0.0.1:19100".parse().unwrap(),
        "127.0.0.1:19101".parse().unwrap(),
    );
    let config = dir.path().join("limiter.toml");
    std::fs::write(
        &config,
        format!(
            "[kernel]\nmode = \"required\"\nattach = \"tc\"\ninterfaces = [\"{}\"]\n\
             pin_path = \"{}\"\nprotected_ports = [{port}]\n[store]\nstate_dir = \"{}\"\n\
             [http]\nproxy_listen = [\"127.0.0.1:19102\"]\napi_listen = [\"{api}\"]\n\
             upstream = \"http://127.0.0.1:19103\"\n[metrics]\nlisten = \"{metrics}\"\n\
             [admin]\nlisten = \"\"\n",
            pair.server_if,
            pins.0.display(),
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
    let _daemon = Running(
        Command::new("nsenter")
            .arg(format!("--net={}", pair.server.path().display()))
            .arg(env!("CARGO_BIN_EXE_limiter-daemon"))
            .args(["run", "--config"])
            .arg(&config)
            .env("LIMITER_EBPF_OBJECT", object_path())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start limiter-daemon"),
    );
    let logs = || std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
    let scrape = || {
        pair.server
            .run(|| try_http(metrics, "GET", "/metrics", &[], None))
            .filter(|r| r.status == 200)
            .map(|r| r.body)
    };
    eventually("the daemon's metrics listener", &scrape);
    // A caller past the anonymous burst: rejects, a strike and a level-1 lockout.
    pair.server.run(|| {
        let body = json!({"ip": "192.0.2.77", "method": "GET", "path": "/"}).to_string();
        for _ in 0..125 {
            let r = http(
                api,
                "POST",
                "/v1/decide",
                &[("content-type", "application/json")],
                Some(body.as_bytes()),
            );
            assert_eq!(r.status, 200, "{}", r.body);
        }
    });
    let text = eventually("a scrape with the lockout and the kernel", || {
        scrape().filter(|t| {
            t.contains("limiter_lockouts_total{") && t.contains("limiter_kernel_verdicts_total{")
        })
    });
    assert!(
        text.contains("limiter_kernel_attached 1"),
        "not attached: {text}\n{}",
        logs()
    );
    // Every family, the kernel's and the lockouts' included, in the classic text format that
    // promtool reads: it has nothing to say.
    let bin = limiter_tests::promtool::binary();
    if limiter_tests::require(bin.is_some(), "promtool (apt-get install prometheus)") {
        let accept = [("accept", "text/plain; version=0.0.4")];
        let classic = pair
            .server
            .run(|| try_http(metrics, "GET", "/metrics", &accept, None))
            .expect("a text scrape")
            .body;
        limiter_tests::promtool::check_metrics(&bin.unwrap(), &classic);
        assert!(
            classic.contains("limiter_kernel_verdicts_total{"),
            "{classic}"
        );
    }
    let exported = scraped_names(&text);
    let dash: Value = serde_json::from_str(&read("grafana/limiter.json")).unwrap();
    let mut named = BTreeSet::new();
    for (file, text) in [
        ("grafana/limiter.json", read("grafana/limiter.json")),
        ("prometheus/alerts.yml", read("prometheus/alerts.yml")),
    ] {
        let names = metric_names(&text);
        assert!(names.len() >= 5, "{file}: {names:?}");
        for n in names {
            assert!(
                exported.contains(&n),
                "{file} names {n}, which the daemon does not export; it exports {exported:?}"
            );
            named.insert(n);
        }
    }
    assert!(dashboard_exprs(&dash).len() >= 15);
    eprintln!("{} metric names checked: {named:?}", named.len());
}
