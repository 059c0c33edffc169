//! Logs from the real daemon binary: with `--log-format json` (or `[log] format = "json"`)
//! every stderr line is a JSON object, and the operator events are there as lines with an
//! `event` field: a lockout made, a reload applied, a reload refused. The flag wins over the
//! file.

use limiter_tests::client::decide;
use limiter_tests::client::metrics;
use limiter_tests::client::request;
use limiter_tests::client::Resp;
use limiter_tests::daemon::config_text;
use limiter_tests::daemon::Daemon;
use limiter_tests::eventually;
use limiter_tests::free_addr;
use limiter_tests::upstream::Upstream;

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
    let mut d = Daemon::run(
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
    let status = eventually("the daemon's exit", || d.try_wait());
    assert!(status.success(), "{status}");

    let log = d.logs();
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
        let mut d = Daemon::run(dir.path(), &text, &[], api);
        d.signal(libc::SIGTERM);
        eventually("the daemon's exit", || d.try_wait());
        assert!(json_lines(&d.logs()).len() >= 2, "{}", d.logs());
    }
    let mut d = Daemon::run(dir.path(), &text, &["--log-format", "text"], api);
    d.signal(libc::SIGTERM);
    eventually("the daemon's exit", || d.try_wait());
    let log = d.logs();
    assert!(!log.is_empty());
    assert!(
        log.lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_err()),
        "{log}"
    );
}

// The access log (`[log] access`): the real daemon writing its own lines, read back as an
// operator's tools read them.

/// Proxy (to a live upstream), API, metrics, anonymous burst 3, `[log] access` at `log`.
struct Edge {
    _up: Upstream,
    d: Daemon,
    proxy: std::net::SocketAddr,
    api: std::net::SocketAddr,
    metrics: std::net::SocketAddr,
}

fn edge(dir: &std::path::Path, log: &str, env: &[(&str, &std::path::Path)]) -> Edge {
    let up = Upstream::start();
    let (proxy, api, metrics) = (free_addr(), free_addr(), free_addr());
    let text = config_text(
        dir,
        &format!(
            "[tiers.anon]\nburst = 3\n[admin]\nlisten = \"\"\n[http]\nproxy_listen = [\"{proxy}\"]\n\
             upstream = \"http://{}\"\napi_listen = [\"{api}\"]\ntrusted_peers = [\"127.0.0.1/32\"]\n\
             [metrics]\nlisten = \"{metrics}\"\n[log]\n{log}",
            up.addr
        ),
    );
    let mut d = Daemon::run_with_env(dir, &text, &[], env, proxy);
    d.wait_listening(api);
    d.wait_listening(metrics);
    Edge {
        _up: up,
        d,
        proxy,
        api,
        metrics,
    }
}

/// The lines of `path` once it holds at least `n`.
fn access_lines(path: &std::path::Path, n: usize) -> Vec<String> {
    eventually(&format!("{n} lines in {}", path.display()), || {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        (lines.len() >= n).then_some(lines)
    })
}

const SECRETS: [&str; 3] = [
    "sessioncookievalue42",
    "bearertokenvalue42",
    "rsa_0123abcd_apikeysecretvalue4242",
];

/// A proxy request carrying every kind of secret, the query included.
fn secret_request(proxy: std::net::SocketAddr, path: &str) -> Resp {
    request(
        proxy,
        "GET",
        &format!("{path}?token={}", SECRETS[1]),
        &[
            ("user-agent", "edge-test/1"),
            ("cookie", &format!("session={}", SECRETS[0])),
            ("authorization", &format!("Bearer {}", SECRETS[1])),
            ("x-api-key", SECRETS[2]),
        ],
        "",
    )
}

/// Plain GETs of `path` (user agent `edge-test/1`) until one is refused; how many were sent.
fn refused_soon(proxy: std::net::SocketAddr, path: &str) -> usize {
    for n in 1..=8 {
        let r = request(proxy, "GET", path, &[("user-agent", "edge-test/1")], "");
        if r.status == 429 {
            return n;
        }
        assert_eq!(r.status, 200, "{r:?}");
    }
    panic!("never refused");
}

#[test]
fn the_access_log_has_one_json_line_per_request_on_every_surface_and_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("logs/access.log");
    let e = edge(
        dir.path(),
        &format!("access = \"{}\"\n", path.display()),
        &[],
    );
    // Own loop: 200 from the upstream; a POST goes through hyper's server.
    assert_eq!(secret_request(e.proxy, "/own").status, 200);
    let post = request(
        e.proxy,
        "POST",
        "/hyper",
        &[("user-agent", "poster/2")],
        "{}",
    );
    assert_eq!(post.status, 200, "{post:?}");
    // HTTP/2 with prior knowledge.
    let h2 = std::process::Command::new("curl")
        .args([
            "-sS",
            "--http2-prior-knowledge",
            "-A",
            "h2-client/3",
            "-o",
            "/dev/null",
        ])
        .arg(format!("http://{}/h2", e.proxy))
        .status()
        .expect("curl is installed");
    assert!(h2.success());
    // The burst is 3: refused soon (the key-carrying request may count apart).
    refused_soon(e.proxy, "/own");
    // `/v1/decide` about another client; forward auth (nginx's convention) about a third.
    for _ in 0..4 {
        assert_eq!(decide(e.api, "203.0.113.5", "/described", None).status, 200);
    }
    let auth = request(
        e.api,
        "GET",
        "/v1/auth",
        &[
            ("x-original-uri", "/original?key=x"),
            ("x-original-method", "DELETE"),
            ("x-real-ip", "198.51.100.9"),
            ("user-agent", "nginx-sub/1"),
        ],
        "",
    );
    assert_eq!(auth.status, 204, "{auth:?}");
    // A head the proxy refuses before deciding.
    let mut s = std::net::TcpStream::connect(e.proxy).unwrap();
    std::io::Write::write_all(
        &mut s,
        b"GET /bad HTTP/1.1\r\nHost: test\r\nno colon\r\n\r\n",
    )
    .unwrap();
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut s, &mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");

    let lines = access_lines(&path, 10);
    let text = lines.join("\n");
    for s in SECRETS {
        assert!(!text.contains(s), "{s} in the access log:\n{text}");
    }
    let json: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let find = |pred: &dyn Fn(&serde_json::Value) -> bool| {
        json.iter()
            .find(|l| pred(l))
            .unwrap_or_else(|| panic!("no such line in:\n{text}"))
            .clone()
    };
    let own = find(&|l| l["path"] == "/own" && l["status"] == 200);
    assert_eq!(own["surface"], "proxy");
    assert_eq!(own["client"], "127.0.0.1");
    assert_eq!(own["peer"], "127.0.0.1");
    assert_eq!(own["method"], "GET");
    assert_eq!(own["host"], "test");
    assert_eq!(own["protocol"], "HTTP/1.1");
    assert_eq!(own["bytes"], 2);
    assert_eq!(own["action"], "allow");
    assert_eq!(own["user_agent"], "edge-test/1");
    assert!(own["tier"].is_string() && own["delay_ms"] == 0, "{own}");
    assert!(own["duration_ms"].as_f64().unwrap() >= 0.0);
    let time = own["time"].as_str().unwrap();
    assert!(
        time.len() == 24 && time.ends_with('Z') && time.as_bytes()[19] == b'.',
        "{time}"
    );
    let hyper = find(&|l| l["path"] == "/hyper");
    assert_eq!(
        (&hyper["method"], &hyper["status"], &hyper["bytes"]),
        (&"POST".into(), &200.into(), &2.into())
    );
    assert_eq!(hyper["user_agent"], "poster/2");
    let h2 = find(&|l| l["path"] == "/h2");
    assert_eq!(h2["protocol"], "HTTP/2.0");
    assert_eq!(h2["user_agent"], "h2-client/3");
    assert_eq!(h2["status"], 200);
    let no = find(&|l| l["status"] == 429);
    assert_eq!(no["surface"], "proxy");
    assert_eq!(no["action"], "reject");
    assert_eq!(no["reason"], "burst");
    assert!(no["bytes"].as_u64().unwrap() > 0, "{no}");
    let d = find(&|l| l["surface"] == "decide");
    assert_eq!(d["client"], "203.0.113.5");
    assert_eq!(d["path"], "/described");
    assert_eq!(d["action"], "allow");
    // A refused decision: the status the app is told to answer.
    let d = find(&|l| l["surface"] == "decide" && l["action"] == "reject");
    assert_eq!((&d["status"], &d["reason"]), (&429.into(), &"burst".into()));
    let a = find(&|l| l["surface"] == "auth");
    assert_eq!(a["client"], "198.51.100.9");
    assert_eq!(a["peer"], "127.0.0.1");
    assert_eq!(
        (&a["method"], &a["path"]),
        (&"DELETE".into(), &"/original".into())
    );
    assert_eq!(a["status"], 204);
    assert_eq!(a["user_agent"], "nginx-sub/1");
    let bad = find(&|l| l["path"] == "/bad");
    assert_eq!(
        (&bad["status"], &bad["method"]),
        (&400.into(), &"GET".into())
    );
    assert!(bad["action"].is_null(), "no decision was made: {bad}");
}

/// `combined` as fail2ban reads it: `failregex = ^<HOST> -.*"(GET|POST|HEAD)[^"]*" 429 `.
/// Split by hand along the regex: host, `- -`, `[time]`, `"request"`, status, bytes,
/// `"referer"`, `"user agent"`.
fn combined_fields(line: &str) -> Option<(&str, &str, &str, u16, u64, &str)> {
    let (host, rest) = line.split_once(" - - [")?;
    let (time, rest) = rest.split_once("] \"")?;
    let (request, rest) = rest.split_once("\" ")?;
    let mut it = rest.splitn(3, ' ');
    let status = it.next()?.parse().ok()?;
    let bytes = it.next()?.parse().ok()?;
    let quoted = it.next()?;
    let (referer, ua) = quoted.strip_prefix('"')?.split_once("\" \"")?;
    let ua = ua.strip_suffix('"')?;
    (!host.contains(' ') && time.ends_with(" +0000") && !referer.contains('"'))
        .then_some((host, time, request, status, bytes, ua))
}

#[test]
fn the_combined_log_reads_as_nginx_s_reopens_on_sigusr1_and_replays() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let mut e = edge(
        dir.path(),
        &format!(
            "access = \"{}\"\naccess_format = \"combined\"\n",
            path.display()
        ),
        &[],
    );
    assert_eq!(secret_request(e.proxy, "/x").status, 200);
    let sent = 1 + refused_soon(e.proxy, "/x");
    let lines = access_lines(&path, sent);
    for s in SECRETS {
        assert!(!lines.join("\n").contains(s), "{s} in {lines:?}");
    }
    let parsed: Vec<_> = lines
        .iter()
        .map(|l| combined_fields(l).unwrap_or_else(|| panic!("not combined: {l:?}")))
        .collect();
    for (host, _, request, _, _, ua) in &parsed {
        assert_eq!(
            (*host, *request, *ua),
            ("127.0.0.1", "GET /x HTTP/1.1", "edge-test/1")
        );
    }
    let statuses: Vec<u16> = parsed.iter().map(|p| p.3).collect();
    assert_eq!(statuses.last(), Some(&429), "{lines:?}");
    assert!(statuses[..sent - 1].iter().all(|&s| s == 200), "{lines:?}");

    // logrotate: the file is moved away, SIGUSR1, and the next line goes to a new file.
    let rotated = dir.path().join("access.log.1");
    std::fs::rename(&path, &rotated).unwrap();
    e.d.signal(libc::SIGUSR1);
    e.d.wait_log("access log reopened", 1);
    assert_eq!(decide(e.api, "192.0.2.44", "/after", None).status, 200);
    let after = access_lines(&path, 1);
    assert!(after[0].starts_with("192.0.2.44 - - ["), "{after:?}");
    assert_eq!(access_lines(&rotated, sent).len(), sent);
    assert!(e.d.running());

    // `replay` reads the daemon's own log, in both formats.
    let json_log = dir.path().join("json.log");
    let json_lines: Vec<String> = parsed
        .iter()
        .map(|(host, time, request, status, _, _)| {
            let iso = limiter_daemon_time(time);
            let (method, target) = request.split_once(' ').unwrap();
            let target = target.trim_end_matches(" HTTP/1.1");
            format!(
                "{{\"time\":\"{iso}\",\"surface\":\"proxy\",\"client\":\"{host}\",\"peer\":\"10.0.0.1\",\
                 \"method\":\"{method}\",\"path\":\"{target}\",\"status\":{status},\"user_agent\":\"x\"}}"
            )
        })
        .collect();
    std::fs::write(&json_log, json_lines.join("\n") + "\n").unwrap();
    for log in [&rotated, &json_log] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_limiter-daemon"))
            .args(["replay", "--json", "--config"])
            .arg(&e.d.config)
            .arg(log)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            report["input"]["requests"],
            sent,
            "{}: {report:#}",
            log.display()
        );
        assert_eq!(report["input"]["malformed"], 0, "{report:#}");
    }
}

/// `06/Dec/2026:01:52:38 +0000` → `2026-12-06T01:52:38.000Z`.
fn limiter_daemon_time(combined: &str) -> String {
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (d, rest) = combined.split_once('/').unwrap();
    let (mon, rest) = rest.split_once('/').unwrap();
    let (y, rest) = rest.split_once(':').unwrap();
    let hms = &rest[..8];
    let m = months.iter().position(|x| *x == mon).unwrap() + 1;
    format!("{y}-{m:02}-{d}T{hms}.000Z")
}

/// A FIFO nobody reads: the writer blocks on it, lines are dropped and counted, and every
/// request is still answered at once.
#[test]
fn a_blocked_access_log_drops_lines_and_never_slows_an_answer() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("access.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a path in this test's own directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // Opened for reading (so the daemon's open succeeds) and never read: once the pipe's
    // buffer is full, every write blocks.
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags_nonblock()
        .open(&fifo)
        .unwrap();
    let e = edge(
        dir.path(),
        &format!("access = \"{}\"\n", fifo.display()),
        &[("LIMITER_TEST_ACCESS_LOG_QUEUE", std::path::Path::new("16"))],
    );
    let started = std::time::Instant::now();
    let mut slowest = std::time::Duration::ZERO;
    for i in 0..600u32 {
        let t = std::time::Instant::now();
        let ip = format!("203.0.{}.{}", i / 250, i % 250 + 1);
        assert_eq!(decide(e.api, &ip, "/fifo", None).status, 200);
        slowest = slowest.max(t.elapsed());
    }
    assert!(
        slowest < std::time::Duration::from_secs(2),
        "a request took {slowest:?} while the log was blocked"
    );
    let dropped = eventually("dropped lines counted", || {
        let m = metrics(e.metrics);
        let v: u64 = m
            .lines()
            .find(|l| l.starts_with("limiter_access_log_dropped_total "))?
            .rsplit(' ')
            .next()?
            .parse()
            .ok()?;
        (v > 0).then_some(v)
    });
    assert!(dropped < 600, "{dropped}");
    let mut d = e.d;
    d.wait_log("access log: lines dropped", 1);
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
}

/// `OpenOptions::custom_flags(O_NONBLOCK)`: a FIFO's read end opens without a writer.
trait NonBlock {
    fn custom_flags_nonblock(&mut self) -> &mut Self;
}

impl NonBlock for std::fs::OpenOptions {
    fn custom_flags_nonblock(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_NONBLOCK)
    }
}

/// A path the daemon cannot create stops it at start, naming the path and the fix.
#[test]
fn an_access_log_the_daemon_cannot_write_stops_it_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, "").unwrap();
    let api = free_addr();
    let text = config(
        dir.path(),
        api,
        3,
        &format!("[log]\naccess = \"{}/access.log\"\n", blocker.display()),
    );
    let config = dir.path().join("limiter.toml");
    std::fs::write(&config, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_limiter-daemon"))
        .args(["run", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not-a-dir") && stderr.contains("LogsDirectory=limiter"),
        "{stderr}"
    );
}
