//! Replay benchmark: lines per second of `limiter-daemon replay` on one core, on a generated
//! log of 1,000,000 lines of mixed callers, beside a baseline measured in the same run that
//! only reads and parses the lines (so the table shows what the engine costs), for combined
//! lines, JSON lines, and gzip input. The target is 300,000 lines/s for the whole replay.
//!
//! Run: `cargo xtask bench replay` (or `cargo bench -p limiter-daemon --bench replay`).
//! `BENCH_LINES` sets the log's length (default 1,000,000).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use limiter_daemon::config::{Config, EnvMap};
use limiter_daemon::replay::client::parse_addr;
use limiter_daemon::replay::input::{LogReader, NextLine};
use limiter_daemon::replay::{combined, json, replay, ExtraField, Format, Options};

/// Lines per second the whole replay must reach.
const TARGET: f64 = 300_000.0;

/// Midnight UTC, 2026-01-05.
const START_SECS: u64 = 1_767_571_200;

/// A small deterministic generator (xorshift): the same log every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One caller of the mix: (address, cookie, authorization).
fn caller(rng: &mut Rng) -> (String, &'static str, String) {
    let roll = rng.below(100);
    // 20,000 readers over 2,000 /24s; one heavy crawler; sessions; API keys.
    let reader = |rng: &mut Rng| {
        let n = rng.below(20_000);
        format!("10.{}.{}.{}", n / 2000 % 250, n % 2000 / 10, 1 + n % 10)
    };
    match roll {
        0..=64 => (reader(rng), "-", "-".into()),
        65..=84 => (reader(rng), "session=abc123; theme=dark", "-".into()),
        85..=94 => ("203.0.113.7".into(), "-", "-".into()),
        _ => {
            let k = rng.below(500);
            (
                format!("198.51.{}.{}", k / 250, k % 250),
                "-",
                format!("Bearer rsa_{k:08x}_abcdefghijklmnopqrstuvwx"),
            )
        }
    }
}

const PATHS: [&str; 4] = ["/", "/api/feeds", "/api/search?q=rust", "/static/app.css"];

fn generate(dir: &Path, lines: u64) -> (PathBuf, PathBuf, PathBuf) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (combined_path, json_path, gz_path) = (
        dir.join("access.log"),
        dir.join("access.jsonl"),
        dir.join("access.log.gz"),
    );
    let mut c = std::io::BufWriter::new(std::fs::File::create(&combined_path).unwrap());
    let mut j = std::io::BufWriter::new(std::fs::File::create(&json_path).unwrap());
    // Two hours of traffic.
    let span_ms = 2 * 3600 * 1000;
    for i in 0..lines {
        let ms = START_SECS * 1000 + i * span_ms / lines;
        let s = ms / 1000 - START_SECS;
        let (addr, cookie, auth) = caller(&mut rng);
        let path = PATHS[rng.below(PATHS.len() as u64) as usize];
        writeln!(
            c,
            "{addr} - - [05/Jan/2026:{:02}:{:02}:{:02} +0000] \"GET {path} HTTP/1.1\" 200 {} \"-\" \"Mozilla/5.0 (X11; Linux x86_64)\" \"-\" \"{cookie}\" \"{auth}\"",
            s / 3600,
            s % 3600 / 60,
            s % 60,
            rng.below(50_000)
        )
        .unwrap();
        writeln!(
            j,
            r#"{{"msec":"{}.{:03}","remote_addr":"{addr}","request":"GET {path} HTTP/1.1","status":200,"http_user_agent":"Mozilla/5.0 (X11; Linux x86_64)","http_cookie":"{cookie}","http_authorization":"{auth}"}}"#,
            ms / 1000,
            ms % 1000
        )
        .unwrap();
    }
    drop((c.into_inner().unwrap(), j.into_inner().unwrap()));
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz_path).unwrap(),
        flate2::Compression::default(),
    );
    gz.write_all(&std::fs::read(&combined_path).unwrap())
        .unwrap();
    gz.finish().unwrap();
    (combined_path, json_path, gz_path)
}

const FIELDS: [ExtraField; 3] = [
    ExtraField::Xff,
    ExtraField::Cookie,
    ExtraField::Authorization,
];

/// The baseline: read and parse every line (and its address), decide nothing. Lines/s.
fn parse_only(path: &Path, json_lines: bool) -> (u64, f64) {
    let started = Instant::now();
    let mut reader = LogReader::open(path).unwrap();
    let mut buf = Vec::new();
    let mut ok = 0u64;
    while reader.next_line(&mut buf).unwrap() != NextLine::End {
        let Ok(text) = std::str::from_utf8(&buf) else {
            continue;
        };
        let line = if json_lines {
            json::parse(text)
        } else {
            combined::parse(text, &FIELDS)
        };
        if let Ok(l) = line {
            if parse_addr(&l.addr).is_some() {
                ok += 1;
            }
        }
    }
    (ok, ok as f64 / started.elapsed().as_secs_f64())
}

/// The whole replay under the default config. Lines/s.
fn full(path: &Path, format: Format) -> (u64, f64) {
    let cfg = Config::from_toml_str("", "bench.toml".as_ref(), &EnvMap::new()).unwrap();
    let opts = Options {
        format,
        fields: FIELDS.to_vec(),
        xff: false,
        top: 20,
    };
    let started = Instant::now();
    let reports = replay(&[("bench.toml".into(), cfg)], &[path.to_path_buf()], &opts).unwrap();
    let secs = started.elapsed().as_secs_f64();
    let r = &reports[0];
    assert_eq!(r.input.malformed, 0, "the generated log is well formed");
    (r.input.requests, r.input.requests as f64 / secs)
}

fn main() {
    let lines: u64 = std::env::var("BENCH_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let (plain, jsonl, gz) = generate(dir.path(), lines);
    println!(
        "replay benchmark: {lines} lines of mixed callers (65% readers, 20% sessions, 10% one \
         crawler, 5% API keys) over two hours, one core, the default config"
    );
    println!();
    println!("| input | read + parse (baseline) lines/s | replay lines/s | engine µs/line | replay / target |");
    println!("|---|---:|---:|---:|---:|");
    let mut worst = f64::MAX;
    for (name, path, format, json_lines) in [
        ("combined", &plain, Format::Combined, false),
        ("JSON lines", &jsonl, Format::Json, true),
        ("combined, gzip", &gz, Format::Combined, false),
    ] {
        let (n_parse, parse) = parse_only(path, json_lines);
        let (n_full, whole) = full(path, format);
        assert_eq!(n_parse, n_full);
        let engine_us = (1e6 / whole - 1e6 / parse).max(0.0);
        println!(
            "| {name} | {parse:.0} | {whole:.0} | {engine_us:.2} | {:.2} |",
            whole / TARGET
        );
        worst = worst.min(whole);
    }
    println!();
    println!(
        "target {TARGET:.0} lines/s: {}",
        if worst >= TARGET { "met" } else { "MISSED" }
    );
}
