//! `limiter-daemon run` (the real binary) serves the operator listener from `[metrics]`:
//! `/healthz`, `/readyz`, and `/metrics` with the configured namespace, decisions made through
//! its API listener, and `kernel_attached 0` when the dataplane is off; state files found
//! corrupt at start counted and named in `/readyz`. Also: `listen = ""` turns the listener off.
//! `/metrics` scraped with curl under each `Accept`: the classic text format passes the real
//! `promtool check metrics` (Debian's prometheus package: a failure under `CI=true` without
//! it), OpenMetrics stays the default, and both carry `build_info` and `process_*`.

use std::net::SocketAddr;
use std::process::Command;

use limiter_tests::client::exchange as http;
use std::path::Path;
use std::time::Duration;

use limiter_tests::daemon::Daemon;
use limiter_tests::free_addr;

/// The daemon with its metrics listener on `listen` ("" = off), namespace `stella`.
fn start(dir: &Path, api: SocketAddr, listen: &str) -> Daemon {
    limiter_tests::daemon::Daemon::with_api(
        dir,
        api,
        &format!("listen = \"{listen}\"\nnamespace = \"stella\""),
    )
}

/// TCP sockets in LISTEN state that process `pid` holds (from /proc: no guessing at ports).
fn listening_sockets(pid: u32) -> usize {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| t.lines().skip(1).map(str::to_string).collect::<Vec<_>>())
        .filter(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.get(3) == Some(&"0A") && cols.get(9).is_some_and(|i| inodes.iter().any(|x| x == i))
        })
        .count()
}

#[test]
fn run_serves_metrics_health_and_readiness_on_its_own_listener() {
    let dir = tempfile::tempdir().unwrap();
    let (api, metrics) = (free_addr(), free_addr());
    let d = start(dir.path(), api, &metrics.to_string());
    let (status, body) = limiter_tests::poll(Duration::from_secs(20), "/healthz", || {
        http(metrics, "GET", "/healthz", "")
    });
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, body) = http(metrics, "GET", "/readyz", "").unwrap();
    assert_eq!(status, 200, "{body}");
    for _ in 0..2 {
        decide_once(api, "203.0.113.50");
    }
    let (status, text) = http(metrics, "GET", "/metrics", "").unwrap();
    assert_eq!(status, 200);
    assert!(
        text.contains(
            "\nstella_decisions_total{tier=\"anon\",action=\"allow\",reason=\"none\",shadow=\"false\"} 2\n"
        ),
        "{text}"
    );
    assert!(text.contains("\nstella_kernel_attached 0\n"), "{text}");
    assert!(text.contains("\nstella_store_degraded 0\n"), "{text}");
    assert!(text.contains("\nstella_state_files_corrupt 0\n"), "{text}");
    assert!(!body.contains("stateFilesSetAside"), "{body}");
    assert_eq!(
        listening_sockets(d.child.as_ref().unwrap().id()),
        2,
        "the API and the metrics listener"
    );
    // The API listener does not serve metrics.
    let (status, _) = http(api, "GET", "/metrics", "").unwrap();
    assert_eq!(status, 404);
}

#[test]
fn corrupt_state_files_are_counted_and_named_in_readyz() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("enforcement.json"), "{\"lockouts\": [tru").unwrap();
    std::fs::write(state.join("keys.json"), "not json at all").unwrap();
    let (api, metrics) = (free_addr(), free_addr());
    let _d = start(dir.path(), api, &metrics.to_string());
    limiter_tests::poll(Duration::from_secs(20), "/healthz", || {
        http(metrics, "GET", "/healthz", "")
    });
    let (status, text) = http(metrics, "GET", "/metrics", "").unwrap();
    assert_eq!(status, 200);
    assert!(text.contains("\nstella_state_files_corrupt 2\n"), "{text}");

    // Still ready (it serves, without those files' contents), and the body says what moved.
    let (status, body) = http(metrics, "GET", "/readyz", "").unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["ready"], true, "{body}");
    let set_aside = v["stateFilesSetAside"].as_array().expect(&body);
    let mut files: Vec<&str> = set_aside
        .iter()
        .map(|f| f["file"].as_str().unwrap())
        .collect();
    files.sort_unstable();
    let expected = [state.join("enforcement.json"), state.join("keys.json")];
    assert_eq!(
        files,
        expected
            .iter()
            .map(|p| p.to_str().unwrap())
            .collect::<Vec<_>>()
    );
    for f in set_aside {
        let (file, moved_to) = (f["file"].as_str().unwrap(), f["movedTo"].as_str().unwrap());
        assert!(moved_to.starts_with(&format!("{file}.corrupt-")), "{f}");
        assert!(
            Path::new(moved_to).is_file(),
            "{moved_to} is where the file went"
        );
    }
    let kept = std::fs::read_to_string(Path::new(
        set_aside
            .iter()
            .find(|f| f["file"].as_str().unwrap().ends_with("keys.json"))
            .unwrap()["movedTo"]
            .as_str()
            .unwrap(),
    ))
    .unwrap();
    assert_eq!(kept, "not json at all", "the evidence is kept as it was");
    decide_once(api, "203.0.113.52");
}

#[test]
fn empty_listen_turns_the_metrics_listener_off() {
    let dir = tempfile::tempdir().unwrap();
    let api = free_addr();
    let d = start(dir.path(), api, "");
    // Serving decisions proves the daemon is up (the metrics listener would be bound before).
    decide_once(api, "203.0.113.51");
    let (status, _) = http(api, "GET", "/healthz", "").unwrap();
    assert_eq!(status, 404, "health lives on the metrics listener only");
    assert_eq!(
        listening_sockets(d.child.as_ref().unwrap().id()),
        1,
        "only the API listener"
    );
}

/// One allowed `/v1/decide` for `ip`, retried until the daemon answers (it may still be
/// starting).
fn decide_once(api: SocketAddr, ip: &str) {
    let body = format!(r#"{{"ip":"{ip}","path":"/"}}"#);
    let (status, _) = limiter_tests::poll(Duration::from_secs(20), "/v1/decide", || {
        http(api, "POST", "/v1/decide", &body)
    });
    assert_eq!(status, 200);
}

/// `/metrics` fetched by curl with `accept` (`None`: no `Accept` header at all): the content
/// type and the body.
fn scrape(metrics: SocketAddr, accept: Option<&str>) -> (String, String) {
    let header = accept.map_or("Accept:".to_string(), |a| format!("Accept: {a}"));
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-H", &header])
        .args(["-w", "\n%{content_type}"])
        .arg(format!("http://{metrics}/metrics"))
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    // The body, then the `-w` line.
    let (body, content_type) = text.rsplit_once('\n').unwrap();
    (content_type.to_string(), body.to_string())
}

/// The OpenMetrics structure a parser relies on: every sample belongs to the family the last
/// `# TYPE` declared (its name, or the name and a suffix its type allows), each family is
/// declared once, and the exposition ends with `# EOF`.
fn assert_openmetrics(text: &str) {
    assert!(text.ends_with("# EOF\n"), "{text}");
    let mut declared = std::collections::BTreeSet::new();
    let (mut family, mut kind) = (String::new(), String::new());
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (f, k) = rest.split_once(' ').unwrap();
            assert!(declared.insert(f.to_string()), "{f} declared twice");
            (family, kind) = (f.to_string(), k.to_string());
        } else if !line.starts_with('#') {
            let name = line.split(['{', ' ']).next().unwrap();
            let suffix = name
                .strip_prefix(family.as_str())
                .unwrap_or_else(|| panic!("{name} outside its family (last declared: {family})"));
            let allowed: &[&str] = match kind.as_str() {
                "counter" => &["_total", "_created"],
                "histogram" => &["_bucket", "_sum", "_count", "_created"],
                "info" => &["_info"],
                _ => &[""],
            };
            assert!(allowed.contains(&suffix), "{name} in a {kind} family");
        }
    }
}

/// The value of the series `series` (name and labels exactly as rendered).
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

#[test]
fn metrics_answer_each_accept_and_the_text_format_passes_promtool() {
    let bin = limiter_tests::promtool::binary();
    if !limiter_tests::require(bin.is_some(), "promtool (apt-get install prometheus)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (api, metrics) = (free_addr(), free_addr());
    let _d = start(dir.path(), api, &metrics.to_string());
    limiter_tests::poll(Duration::from_secs(20), "/healthz", || {
        http(metrics, "GET", "/healthz", "")
    });
    decide_once(api, "203.0.113.53");

    const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
    // Prometheus 2.x's scrape header prefers OpenMetrics; promtool's users ask for text.
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                      version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    for (accept, want) in [
        (None, OPENMETRICS),
        (Some("*/*"), OPENMETRICS),
        (Some(prometheus), OPENMETRICS),
        (
            Some("application/openmetrics-text; version=1.0.0"),
            OPENMETRICS,
        ),
        (Some("text/plain; version=0.0.4"), TEXT),
        (Some("text/plain"), TEXT),
    ] {
        let (content_type, body) = scrape(metrics, accept);
        assert_eq!(content_type, want, "Accept: {accept:?}");
        if want == OPENMETRICS {
            assert_openmetrics(&body);
        }
    }

    let (_, text) = scrape(metrics, Some("text/plain; version=0.0.4"));
    limiter_tests::promtool::check_metrics(&bin.unwrap(), &text);
    assert!(
        !text.contains("# EOF") && !text.contains("# UNIT"),
        "{text}"
    );
    assert!(
        text.contains(
            "\nstella_decisions_total{tier=\"anon\",action=\"allow\",reason=\"none\",shadow=\"false\"} 1\n"
        ),
        "{text}"
    );

    // build_info: this checkout's version and commit (CI builds a git clone).
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or("unknown".to_string(), |o| {
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        });
    let (_, om) = scrape(metrics, None);
    for body in [&text, &om] {
        let series = format!(
            "stella_build_info{{version=\"{}\",commit=\"{commit}\",features=\"",
            env!("CARGO_PKG_VERSION")
        );
        assert!(
            body.contains(&format!("\n{series}")),
            "{series} in:\n{body}"
        );
    }

    // process_*: the daemon's own figures, sane.
    let rss = value(&text, "process_resident_memory_bytes");
    assert!(rss > 1e6, "resident memory {rss}");
    assert!(value(&text, "process_virtual_memory_bytes") >= rss);
    let open = value(&text, "process_open_fds");
    assert!(
        open > 0.0 && open <= value(&text, "process_max_fds"),
        "{open}"
    );
    assert!(value(&text, "process_cpu_seconds_total") > 0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = value(&text, "process_start_time_seconds");
    assert!(
        started <= now + 1.0 && started > now - 300.0,
        "{started} vs {now}"
    );
    assert!(value(&om, "process_open_fds") > 0.0);
}
