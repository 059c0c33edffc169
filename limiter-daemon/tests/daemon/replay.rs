//! `limiter-daemon replay` from outside: the real binary on generated access logs whose
//! answers are known exactly (combined, JSON lines, gzip), its `--json` report parsed,
//! `--compare`, malformed lines counted, and nothing written to the state directory.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Midnight UTC, 2026-01-05: logs start on an hour boundary so the hourly windows are exact.
const START_SECS: u64 = 1_767_571_200;

struct Dir(tempfile::TempDir);

impl Dir {
    fn new() -> Dir {
        Dir(tempfile::tempdir().unwrap())
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }

    /// A config whose state directory must never appear (a replay writes nothing).
    fn config(&self, name: &str, body: &str) -> PathBuf {
        let p = self.path(name);
        let state = self.path(&format!("{name}.state"));
        std::fs::write(
            &p,
            format!("{body}\n[store]\nstate_dir = \"{}\"\n", state.display()),
        )
        .unwrap();
        p
    }

    fn write(&self, name: &str, lines: &[String]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        p
    }

    fn no_state_written(&self) {
        for e in std::fs::read_dir(self.0.path()).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            assert!(!name.ends_with(".state"), "replay created {name}");
        }
    }
}

fn replay(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_limiter-daemon"));
    cmd.arg("replay");
    for a in args {
        cmd.arg(a);
    }
    for var in limiter_daemon::config::ENV_VARS {
        cmd.env_remove(var);
    }
    cmd.output().expect("run limiter-daemon replay")
}

fn ok_json(out: &Output) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "replay failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The counts of `tier` × `reason` (`None`: admitted at once) in a JSON report.
fn row(report: &Value, tier: &str, reason: Option<&str>) -> [u64; 4] {
    let want = reason.map_or(Value::Null, |r| Value::String(r.into()));
    let rows = report["decisions"].as_array().unwrap();
    rows.iter()
        .find(|r| r["tier"] == tier && r["reason"] == want)
        .map(|r| ["allowed", "delayed", "delayMs", "refused"].map(|k| r[k].as_u64().unwrap()))
        .unwrap_or([0; 4])
}

fn lockouts(report: &Value) -> Vec<(u64, u64)> {
    report["lockouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["level"].as_u64().unwrap(), l["count"].as_u64().unwrap()))
        .collect()
}

/// A combined line from `addr` at `ms` after [`START_SECS`] (the log's resolution: seconds).
fn combined(addr: &str, ms: u64, path: &str, extra: &str) -> String {
    let s = ms / 1000;
    let (h, m, sec) = (s / 3600, s % 3600 / 60, s % 60);
    assert!(h < 24, "the generated logs stay within one day");
    format!(
        "{addr} - - [05/Jan/2026:{h:02}:{m:02}:{sec:02} +0000] \"GET {path} HTTP/1.1\" 200 512 \"-\" \"bot/1.0\"{extra}"
    )
}

/// A JSON line from `addr` at `ms` after [`START_SECS`] (nginx `$msec`: milliseconds).
fn json_line(addr: &str, ms: u64, path: &str) -> String {
    let t = START_SECS * 1000 + ms;
    format!(
        r#"{{"msec":"{}.{:03}","remote_addr":"{addr}","request":"GET {path} HTTP/1.1","status":200}}"#,
        t / 1000,
        t % 1000
    )
}

/// Anonymous: 120 a minute, 600 an hour; the daily quota off, so hours are what is measured.
const HOURLY_ONLY: &str =
    "[tiers.anon]\nburst = 120\nhourly = 600\n[default_route]\nlimits = [\"burst\", \"hourly\"]\n";

/// One crawler, 100 requests a minute (one every 600 ms) for two hours from midnight.
fn crawler_log() -> Vec<String> {
    (0..12_000u64)
        .map(|i| combined("203.0.113.7", i * 600, &format!("/page/{i}"), ""))
        .collect()
}

#[test]
fn a_crawler_at_100_a_minute_for_two_hours_is_refused_hourly_and_never_struck() {
    let dir = Dir::new();
    let cfg = dir.config("limiter.toml", HOURLY_ONLY);
    let log = dir.write("access.log", &crawler_log());
    let report = ok_json(&replay(&[&"--json", &"--config", &cfg, &log]));
    // Each UTC hour brings 6,000 requests against a budget of 600: 600 admitted, 5,400 refused
    // `hourly`, twice. 100 a minute stays under the burst of 120, so no strike, no lockout.
    assert_eq!(row(&report, "anon", None), [1200, 0, 0, 0]);
    assert_eq!(row(&report, "anon", Some("hourly")), [0, 0, 0, 2 * 5400]);
    assert_eq!(row(&report, "anon", Some("burst")), [0; 4]);
    assert_eq!(
        report["decisions"].as_array().unwrap().len(),
        2,
        "{report:#}"
    );
    assert_eq!(lockouts(&report), []);
    assert_eq!(report["input"]["requests"], 12_000);
    assert_eq!(report["input"]["malformed"], 0);
    assert_eq!(report["input"]["from"], "2026-01-05T00:00:00Z");
    assert_eq!(report["input"]["to"], "2026-01-05T01:59:59Z");
    let top = &report["topIdentities"][0];
    assert_eq!(top["name"], "203.0.113.7");
    assert_eq!(top["refused"], 10_800);
    assert_eq!(report["topNetworks"][0]["name"], "203.0.113.0/24");
    dir.no_state_written();
}

#[test]
fn a_loop_at_600_a_minute_earns_lockouts_at_levels_1_2_and_3() {
    let dir = Dir::new();
    let cfg = dir.config(
        "limiter.toml",
        "[tiers.anon]\nburst = 120\nhourly = 600\n[lockout]\nbase = \"60s\"\ndecay = \"1h\"\n",
    );
    // Ten a second for five minutes, as JSON lines. Strike 1 at 12 s locks for 60 s; back at
    // 72 s, the burst is spent again within seconds: strike 2 locks 120 s; strike 3 (~216 s)
    // locks 240 s, past the end of the log, so there is no fourth.
    let lines: Vec<String> = (0..3000u64)
        .map(|i| json_line("198.51.100.9", i * 100, "/api/search"))
        .collect();
    let log = dir.write("access.jsonl", &lines);
    let report = ok_json(&replay(&[
        &"--config",
        &cfg,
        &"--format",
        &"json",
        &"--json",
        &log,
    ]));
    assert_eq!(lockouts(&report), [(1, 1), (2, 1), (3, 1)]);
    // Each strike is one `burst` refusal; everything else while locked is `locked`.
    assert_eq!(row(&report, "anon", Some("burst"))[3], 3);
    // Every lockout outlasts the burst window that earned it, so each return starts with an
    // empty window and is admitted 120 before the next strike: 3 × 120 admitted, and the
    // rest (3,000 − 360 − 3) refused `locked`.
    assert_eq!(row(&report, "anon", None)[0], 360);
    assert_eq!(row(&report, "anon", Some("locked"))[3], 2637);
    assert_eq!(
        report["decisions"].as_array().unwrap().len(),
        3,
        "{report:#}"
    );
    assert_eq!(report["input"]["to"], "2026-01-05T00:04:59.900Z");
    dir.no_state_written();
}

#[test]
fn gzip_input_gives_the_same_report_as_plain() {
    let dir = Dir::new();
    let cfg = dir.config("limiter.toml", HOURLY_ONLY);
    let lines = crawler_log();
    let plain = dir.write("access.log", &lines);
    // Rotated and compressed, no `.gz` in the name: the magic bytes say gzip.
    let zipped = dir.path("access.log.1");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all((lines.join("\n") + "\n").as_bytes()).unwrap();
    std::fs::write(&zipped, gz.finish().unwrap()).unwrap();
    let a = ok_json(&replay(&[&"--json", &"--config", &cfg, &plain]));
    let b = ok_json(&replay(&[&"--json", &"--config", &cfg, &zipped]));
    assert_eq!(a["decisions"], b["decisions"]);
    assert_eq!(row(&b, "anon", Some("hourly"))[3], 10_800);
}

#[test]
fn compare_puts_two_configs_side_by_side_with_the_differences() {
    let dir = Dir::new();
    let a = dir.config("a.toml", HOURLY_ONLY);
    let b = dir.config(
        "b.toml",
        &HOURLY_ONLY.replace("hourly = 600", "hourly = 1000"),
    );
    let log = dir.write("access.log", &crawler_log());
    let out = replay(&[&"--config", &a, &"--compare", &b, &log]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |what: &str| -> Vec<String> {
        let l = text
            .lines()
            .find(|l| l.starts_with(what))
            .unwrap_or_else(|| panic!("no {what:?} in:\n{text}"));
        l[what.len()..]
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    // B's budget of 1,000 admits 400 more each hour.
    assert_eq!(line("anon - allowed"), ["1200", "2000", "+800"]);
    assert_eq!(line("anon hourly refused"), ["10800", "10000", "-800"]);
    assert!(text.contains(&format!("A = {}", a.display())), "{text}");

    let c = ok_json(&replay(&[
        &"--json",
        &"--config",
        &a,
        &"--compare",
        &b,
        &log,
    ]));
    assert_eq!(row(&c["a"], "anon", Some("hourly"))[3], 10_800);
    assert_eq!(row(&c["b"], "anon", Some("hourly"))[3], 10_000);
    let changed: Vec<&str> = c["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["a"] != l["b"])
        .map(|l| l["what"].as_str().unwrap())
        .collect();
    assert_eq!(
        changed,
        [
            "anon - allowed",
            "anon hourly refused",
            "total allowed",
            "total refused"
        ]
    );
    assert_eq!(c["differences"], 4);
}

#[test]
fn malformed_lines_are_counted_and_named_never_fatal() {
    let dir = Dir::new();
    let cfg = dir.config("limiter.toml", HOURLY_ONLY);
    let good = |i: u64| combined("192.0.2.1", i * 1000, "/", "");
    let mut lines = vec![
        good(0),
        "garbage".to_string(),                         // 2
        good(1).replace("05/Jan/2026", "35/Jan/2026"), // 3: bad date
        "192.0.2.1 - - [05/Jan/2026:00:00:02 +0000] \"\\x16\\x03\\x01\" 400 0 \"-\" \"-\"".into(), // 4
        good(3).replace("192.0.2.1", "not-an-ip"), // 5
        String::new(),                             // blank: ignored
        r#"{"remote_addr":"192.0.2.1","request":"GET / HTTP/1.1"}"#.into(), // 7: no time
        "{\"unterminated".into(),                  // 8
        good(4),
    ];
    // Out of order by a little: replayed at the latest time seen, never an error.
    lines.push(good(2));
    let log = dir.path("access.log");
    let mut bytes = (lines.join("\n") + "\n").into_bytes();
    bytes.extend_from_slice(b"\xff\xfe not utf-8\n"); // 11
    std::fs::write(&log, bytes).unwrap();

    let report = ok_json(&replay(&[&"--json", &"--config", &cfg, &log]));
    let input = &report["input"];
    assert_eq!(input["lines"], 10, "{input:#}");
    assert_eq!(input["requests"], 3);
    assert_eq!(input["malformed"], 7);
    assert_eq!(input["outOfOrder"], 1);
    let first: Vec<(u64, &str)> = input["malformedFirst"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["line"].as_u64().unwrap(), s["why"].as_str().unwrap()))
        .collect();
    assert_eq!(
        first,
        [
            (2, "not in the log format"),
            (3, "unreadable timestamp"),
            (4, "no METHOD TARGET request"),
            (5, "client address is not an IP"),
            (7, "unreadable timestamp"),
        ]
    );
    assert_eq!(row(&report, "anon", None)[0], 3);

    // The text report says the same.
    let out = replay(&[&"--config", &cfg, &log]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("3 replayed, 7 malformed, 1 out of order"),
        "{text}"
    );
    assert!(
        text.contains("access.log:2: not in the log format"),
        "{text}"
    );
}

/// One line dated 9999-12-31 amid 3,000 clean lines used to move the clock there: the 1,500
/// lines after it were decided in its first second (2,900 refusals, 5 lockouts, exit 0).
#[test]
fn lines_stamped_far_from_the_others_are_malformed_and_do_not_move_the_clock() {
    let dir = Dir::new();
    let cfg = dir.config("limiter.toml", HOURLY_ONLY);
    // Ten addresses taking turns, one line every 200 ms: each address sends 30 a minute and
    // 300 in the 10 minutes, far under 120 a minute and 600 an hour.
    let mut lines: Vec<String> = (0..3000u64)
        .map(|i| combined(&format!("192.0.2.{}", i % 10), i * 200, "/", ""))
        .collect();
    let stamped = |path: &str, time: &str| {
        combined("192.0.2.1", 0, path, "").replace("[05/Jan/2026:00:00:00 +0000]", time)
    };
    // In the future: malformed wherever it stands.
    lines.insert(1500, stamped("/rogue", "[31/Dec/9999:23:59:59 +0000]"));
    // A day and a half after the others, and the next line goes back: not a real jump.
    lines.insert(2000, stamped("/ahead", "[06/Jan/2026:12:00:00 +0000]"));
    // An hour before the lines around it.
    lines.insert(2500, stamped("/stale", "[04/Jan/2026:23:05:00 +0000]"));
    let log = dir.write("access.log", &lines);
    let report = ok_json(&replay(&[&"--json", &"--config", &cfg, &log]));
    let input = &report["input"];
    assert_eq!(input["requests"], 3000, "{input:#}");
    assert_eq!(input["malformed"], 3, "{input:#}");
    let why: Vec<(u64, &str)> = input["malformedFirst"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["line"].as_u64().unwrap(), s["why"].as_str().unwrap()))
        .collect();
    assert_eq!(
        why,
        [
            (
                1501,
                "stamped more than a day after the time the replay runs"
            ),
            (
                2001,
                "stamped more than 10 minutes after the lines around it (the clock was not moved)"
            ),
            (
                2501,
                "stamped more than 10 minutes before the line before it"
            ),
        ]
    );
    assert_eq!(row(&report, "anon", None), [3000, 0, 0, 0], "{report:#}");
    assert_eq!(report["totals"]["refused"], 0);
    assert_eq!(lockouts(&report), []);
    assert_eq!(input["to"], "2026-01-05T00:09:59Z", "{input:#}");
}

/// A gap in the log (a quiet night) is not a bad stamp: the line after it confirms the jump.
#[test]
fn a_gap_confirmed_by_the_next_line_moves_the_clock() {
    let dir = Dir::new();
    let cfg = dir.config("limiter.toml", HOURLY_ONLY);
    // 600 requests in the first hour spend the hourly budget; after a six-hour gap it is back.
    let mut lines: Vec<String> = (0..700u64)
        .map(|i| combined("203.0.113.9", i * 1000, "/", ""))
        .collect();
    let late = 6 * 3600 * 1000;
    lines.extend((0..10u64).map(|i| combined("203.0.113.9", late + i * 1000, "/", "")));
    let log = dir.write("access.log", &lines);
    let report = ok_json(&replay(&[&"--json", &"--config", &cfg, &log]));
    assert_eq!(report["input"]["malformed"], 0, "{report:#}");
    assert_eq!(row(&report, "anon", None)[0], 610, "{report:#}");
    assert_eq!(row(&report, "anon", Some("hourly"))[3], 100);
}

/// A truncated `.gz` used to print no report and exit 1.
#[test]
fn a_truncated_gzip_prints_the_report_of_what_was_read_and_exits_3() {
    let dir = Dir::new();
    let cfg = dir.config("limiter.toml", HOURLY_ONLY);
    let lines = crawler_log();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all((lines.join("\n") + "\n").as_bytes()).unwrap();
    let mut bytes = gz.finish().unwrap();
    bytes.truncate(bytes.len() / 2);
    let zipped = dir.path("access.log.2.gz");
    std::fs::write(&zipped, bytes).unwrap();

    let out = replay(&[&"--json", &"--config", &cfg, &zipped]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("access.log.2.gz") && err.contains("could not be read past line"),
        "{err}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON report ({e}); stderr: {err}"));
    let input = &report["input"];
    let cut = &input["cutShort"];
    assert!(
        cut["file"].as_str().unwrap().ends_with("access.log.2.gz"),
        "{cut}"
    );
    let read = cut["afterLine"].as_u64().unwrap();
    assert!(read > 1000 && read < 12_000, "{input:#}");
    assert_eq!(input["requests"], read, "{input:#}");
    assert_eq!(
        report["totals"]["allowed"].as_u64().unwrap()
            + report["totals"]["refused"].as_u64().unwrap(),
        read
    );

    // The text report says so at the top, and the exit code is the same.
    let out = replay(&[&"--config", &cfg, &zipped]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text.contains(&format!(
            "INCOMPLETE: {} could not be read past line {read}",
            zipped.display()
        )),
        "{text}"
    );
}

/// One 2 GB line took 3 GB of memory; a line past 1 MiB is now malformed, read through unheld.
#[test]
fn a_line_longer_than_1_mib_is_malformed() {
    let dir = Dir::new();
    let cfg = dir.config("limiter.toml", HOURLY_ONLY);
    let long_path = format!("/{}", "a".repeat(3 << 20));
    let lines = vec![
        combined("192.0.2.5", 0, "/", ""),
        combined("192.0.2.5", 1000, &long_path, ""),
        combined("192.0.2.5", 2000, "/", ""),
    ];
    let log = dir.write("access.log", &lines);
    let report = ok_json(&replay(&[&"--json", &"--config", &cfg, &log]));
    let input = &report["input"];
    assert_eq!(input["requests"], 2, "{}", input["malformedFirst"]);
    assert_eq!(input["malformed"], 1);
    assert_eq!(input["malformedFirst"][0]["line"], 2);
    assert_eq!(input["malformedFirst"][0]["why"], "longer than 1 MiB");
}

#[test]
fn credentials_and_forwarded_clients_come_from_an_extended_combined_log() {
    let dir = Dir::new();
    let cfg = dir.config(
        "limiter.toml",
        "[identity]\ntrusted_proxies = [\"10.0.0.0/8\"]\n",
    );
    let key = "rsa_0a1b2c3d_abcdefghijklmnopqrstuvwx";
    let lines = [
        // A session cookie: the session rung.
        combined(
            "192.0.2.1",
            0,
            "/",
            " \"-\" \"session=abc; theme=dark\" \"-\"",
        ),
        // From the trusted proxy: the client is the forwarded address.
        combined(
            "10.0.0.5",
            1000,
            "/",
            " \"198.51.100.23, 10.0.0.9\" \"-\" \"-\"",
        ),
        // From anyone else the field is not believed.
        combined("192.0.2.2", 2000, "/", " \"198.51.100.99\" \"-\" \"-\""),
        // An API key nothing can verify: one rung down, the session rung.
        combined(
            "192.0.2.3",
            3000,
            "/",
            &format!(" \"-\" \"-\" \"Bearer {key}\""),
        ),
    ];
    let log = dir.write("access.log", &lines);
    let fields = "xff,cookie,authorization";
    let report = ok_json(&replay(&[
        &"--json",
        &"--fields",
        &fields,
        &"--config",
        &cfg,
        &log,
    ]));
    assert_eq!(row(&report, "session", None)[0], 2, "{report:#}");
    assert_eq!(row(&report, "anon", None)[0], 2);
    assert_eq!(report["keysPresented"], 1);

    // Refuse everything (a burst of 1 is spent by the first request) to see who was counted.
    let strict = dir.config(
        "strict.toml",
        "[identity]\ntrusted_proxies = [\"10.0.0.0/8\"]\n[tiers.anon]\nburst = 1\n",
    );
    let twice: Vec<String> = lines[1..3]
        .iter()
        .flat_map(|l| [l.clone(), l.clone()])
        .collect();
    let log = dir.write("twice.log", &twice);
    // The identities refused, sorted, of a replay of `log` with `extra` options.
    let refused = |extra: &[&dyn AsRef<std::ffi::OsStr>]| {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> =
            vec![&"--json", &"--fields", &fields, &"--config", &strict, &log];
        args.splice(1..1, extra.iter().copied());
        let report = ok_json(&replay(&args));
        let mut names: Vec<String> = report["topIdentities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        names.sort_unstable();
        names
    };
    assert_eq!(refused(&[]), ["192.0.2.2", "198.51.100.23"]);
    // `--xff` believes the field from any peer.
    assert_eq!(refused(&[&"--xff"]), ["198.51.100.23", "198.51.100.99"]);
    // The key never reaches the report.
    assert!(!String::from_utf8_lossy(
        &replay(&[
            &"--config",
            &cfg,
            &"--fields",
            &fields,
            &dir.path("access.log")
        ])
        .stdout
    )
    .contains("abcdefghij"));
}

#[test]
fn a_bad_config_or_a_missing_log_is_a_usage_error_naming_it() {
    let dir = Dir::new();
    let bad = dir.path("bad.toml");
    std::fs::write(&bad, "[tiers.anon]\nburst = 0\n").unwrap();
    let log = dir.write("access.log", &crawler_log()[..1]);
    let out = replay(&[&"--config", &bad, &log]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("tiers.anon.burst"), "{err}");

    let good = dir.config("limiter.toml", "");
    let missing = Path::new("/nonexistent/access.log");
    let out = replay(&[&"--config", &good, &missing]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("/nonexistent/access.log"), "{err}");
}

#[test]
fn two_hundred_addresses_of_one_slash_24_are_refused_network() {
    let dir = Dir::new();
    let cfg = dir.config("limiter.toml", "");
    // 200 addresses, 50 requests each over one hour: each far under its own budgets (120 a
    // minute, 600 an hour), 10,000 together against the /24's default of ten times the
    // anonymous hourly budget (6,000).
    let mut lines = Vec::new();
    for round in 0..50u64 {
        for host in 0..200u64 {
            let ms = (round * 200 + host) * 360;
            lines.push(combined(&format!("203.0.113.{}", host + 1), ms, "/", ""));
        }
    }
    let log = dir.write("access.log", &lines);
    let report = ok_json(&replay(&[&"--json", &"--config", &cfg, &log]));
    // All inside one UTC hour, 166 a minute from the /24 (under its burst of 1,200): the first
    // 6,000 are admitted, the other 4,000 refused `network`, none struck.
    let refused = row(&report, "anon", Some("network"))[3];
    assert_eq!(refused, 4_000, "{report:#}");
    assert_eq!(row(&report, "anon", None)[0], 6_000, "{report:#}");
    assert_eq!(row(&report, "anon", Some("hourly"))[3], 0);
    assert_eq!(lockouts(&report), vec![], "{report:#}");
    assert_eq!(report["topNetworks"][0]["name"], "203.0.113.0/24");
    assert_eq!(report["topNetworks"][0]["refused"], refused);
}

/// Issue 21 P6: replay shows what a network's strike locked and why. Eleven addresses of one
/// /24 send 231 requests in 23 s against a network burst of 200: the strike locks those eleven
/// (cause `network`, the reason naming the /24), and 203.0.113.7, arriving afterwards having
/// sent nothing, is refused `network`, not `locked`.
#[test]
fn a_network_strike_reports_the_addresses_it_locked_and_why() {
    let dir = Dir::new();
    let cfg = dir.config(
        "limiter.toml",
        "[tiers.anon]\nburst = 100\n[networks.prefix]\nburst = 200\nhourly = 100000\n",
    );
    let mut lines: Vec<String> = (0..231u64)
        .map(|i| combined(&format!("203.0.113.{}", 101 + i % 11), i * 100, "/", ""))
        .collect();
    lines.push(combined("203.0.113.7", 30_000, "/", ""));
    let log = dir.write("access.log", &lines);
    let report = ok_json(&replay(&[&"--json", &"--config", &cfg, &log]));
    assert_eq!(lockouts(&report), vec![(1, 11)], "{report:#}");
    let locked = report["locked"].as_array().unwrap();
    assert_eq!(locked.len(), 1, "{report:#}");
    assert_eq!(locked[0]["cause"], "network");
    assert_eq!(locked[0]["reason"], "network 203.0.113.0/24 burst");
    assert_eq!(locked[0]["lockouts"], 11);
    let shown: Vec<&str> = locked[0]["locked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(shown.len(), 5, "the first five named: {shown:?}");
    assert!(!shown.contains(&"203.0.113.7"), "{shown:?}");
    // The 201st request struck (`network`); the eleven's remaining 30 were `locked`; the
    // newcomer was refused by the spent budget.
    assert_eq!(row(&report, "anon", Some("network"))[3], 2, "{report:#}");
    assert_eq!(row(&report, "anon", Some("locked"))[3], 30, "{report:#}");

    let text = replay(&[&"--config", &cfg, &log]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("network  network 203.0.113.0/24 burst") && text.contains("11"),
        "{text}"
    );
}

#[test]
fn a_logged_signature_agent_is_its_own_rung_as_a_claimed_agent() {
    let d = Dir::new();
    // One agent from ten addresses, 300 requests in the hour (one every 12 s); one more
    // caller naming a plain-http "agent", which names none.
    let mut lines: Vec<String> = (0..300u64)
        .map(|i| {
            let line = json_line(&format!("198.51.100.{}", i % 10), i * 12_000, "/a");
            line.replace(
                r#""status":200}"#,
                r#""status":200,"http_signature_agent":"sig1=\"https://agent.example\""}"#,
            )
        })
        .collect();
    lines.push(json_line("192.0.2.1", 3_599_000, "/a").replace(
        r#""status":200}"#,
        r#""signature_agent":"\"http://plain.example\""}"#,
    ));
    let log = d.write("agents.jsonl", &lines);
    let body = format!(
        "{HOURLY_ONLY}[agents]\nenabled = true\n[[agents.budgets]]\nagent = \"https://agent.example\"\nhourly = 100\n"
    );
    let on = d.config("on.toml", &body);
    let r = ok_json(&replay(&[&"--config", &on, &"--json", &log]));
    assert_eq!(row(&r, "agent", None), [100, 0, 0, 0], "{r}");
    assert_eq!(
        row(&r, "agent", Some("hourly")),
        [0, 0, 0, 200],
        "one budget: {r}"
    );
    assert_eq!(row(&r, "anon", None), [1, 0, 0, 0], "{r}");
    let text = replay(&[&"--config", &on, &log]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("agent: claimed"), "{text}");
    // A config that does not verify agents meters them as their addresses.
    let off = d.config("off.toml", HOURLY_ONLY);
    let r = ok_json(&replay(&[&"--config", &off, &"--json", &log]));
    assert_eq!(row(&r, "agent", None), [0; 4], "{r}");
    assert_eq!(row(&r, "anon", None), [301, 0, 0, 0], "{r}");
    d.no_state_written();
}
