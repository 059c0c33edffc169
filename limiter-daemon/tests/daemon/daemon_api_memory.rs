//! What `/v1/decide` bodies cost the real binary (`limiter-daemon run`, mimalloc as shipped),
//! measured from outside in `/proc/<pid>/status`: 16 concurrent maximal bodies, of every shape
//! that used to hurt (a full 64 KiB body, one packed with header entries, the probe's 25,000
//! entries, 1.5 MB), must leave the peak RSS (`VmHWM`) under 50 MB above the idle daemon's.
//! Before `[http] api_max_body`, axum's 2 MiB default and a `serde_json::Value` of the body
//! took one 1.5 MB request from 33 to 218 MB, and 16 at once to 268 MB.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use limiter_tests::daemon::Daemon;
use limiter_tests::free_addr;

/// One `POST /v1/decide` on its own connection: the status, or `None` when the daemon closed
/// the connection first (it may stop reading an oversized body and reset the connection
/// before the client has read the 413).
fn post(mut s: TcpStream, body: &[u8]) -> Option<u16> {
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let head = format!(
        "POST /v1/decide HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    // A write cut short by the daemon's answer is expected for bodies over the limit.
    let _sent = s
        .write_all(head.as_bytes())
        .and_then(|()| s.write_all(body));
    let mut out = Vec::new();
    let _read = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    text.split(' ').nth(1)?.parse().ok()
}

/// `VmRSS` and `VmHWM` of `pid`, in KiB.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} missing from /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resets `VmHWM` to the current RSS (`clear_refs` value 5), so the peak measured is the
/// load's, not start-up's. `false` where the kernel refuses; the peak then includes start-up,
/// which only overstates the growth.
fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

fn headers_body(entries: &[String], pad: usize) -> Vec<u8> {
    format!(
        r#"{{"ip":"203.0.113.77","path":"/api/search","pad":"{}","headers":{{{}}}}}"#,
        "p".repeat(pad),
        entries.join(",")
    )
    .into_bytes()
}

/// Bodies of every shape, each as large as its kind gets, with the status each should get.
fn shapes(max_body: usize) -> Vec<(&'static str, Vec<u8>, Option<u16>)> {
    // 64 fields (max_header_count) of 16,000 bytes in all (under max_header_bytes), padded to
    // the body limit: the largest body that is parsed and decided.
    let full: Vec<String> = (0..64)
        .map(|i| format!(r#""x-f{i:02}":"{}""#, "v".repeat(240)))
        .collect();
    let mut allowed = headers_body(&full, 0);
    let pad = max_body - allowed.len();
    allowed = headers_body(&full, pad);
    assert_eq!(allowed.len(), max_body);
    // As many tiny entries as fit in the limit: refused at the 65th value.
    let mut packed: Vec<String> = Vec::new();
    while headers_body(&packed, 0).len() + 16 < max_body {
        packed.push(format!(r#""h{}":"v""#, packed.len()));
    }
    // The probe's bodies: 25,000 entries (364 KB), and 1.5 MB.
    let probe: Vec<String> = (0..25_000)
        .map(|i| format!(r#""x-probe-header-{i}":"value""#))
        .collect();
    let huge: Vec<String> = (0..120_000).map(|i| format!(r#""h{i}":"v""#)).collect();
    vec![
        ("a maximal allowed body", allowed, Some(200)),
        (
            "a body packed with entries",
            headers_body(&packed, 0),
            Some(431),
        ),
        ("25,000 entries", headers_body(&probe, 0), None),
        ("1.5 MB", headers_body(&huge, 0), None),
    ]
}

#[test]
fn sixteen_concurrent_maximal_bodies_leave_rss_growth_under_50_mb() {
    const CONCURRENT: usize = 16;
    const ROUNDS: usize = 3;
    const LIMIT_KIB: u64 = 50 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let api = free_addr();
    let d = Daemon::with_api(dir.path(), api, "listen = \"\"");
    let pid = d.child.as_ref().unwrap().id();
    let shapes = shapes(64 * 1024);
    assert!(shapes[3].1.len() > 1_500_000, "{}", shapes[3].1.len());

    let small = br#"{"ip":"203.0.113.77","path":"/"}"#;
    let status = limiter_tests::poll(Duration::from_secs(20), "/v1/decide", || {
        post(TcpStream::connect(api).ok()?, small)
    });
    assert_eq!(status, 200);
    let (baseline, _) = memory(pid);
    let peak_was_reset = reset_peak(pid);
    // One of each alone first (the probe's single 1.5 MB body took 185 MB).
    for (what, body, want) in &shapes {
        let got = post(TcpStream::connect(api).unwrap(), body);
        if want.is_some() {
            assert_eq!(got, *want, "{what}");
        }
    }

    for _ in 0..ROUNDS {
        for (what, body, want) in &shapes {
            let body = Arc::new(body.clone());
            let barrier = Arc::new(Barrier::new(CONCURRENT));
            let threads: Vec<_> = (0..CONCURRENT)
                .map(|_| {
                    let stream = TcpStream::connect(api).unwrap();
                    let (body, barrier) = (Arc::clone(&body), Arc::clone(&barrier));
                    std::thread::spawn(move || {
                        barrier.wait();
                        post(stream, &body)
                    })
                })
                .collect();
            for t in threads {
                let got = t.join().unwrap();
                match want {
                    Some(_) => assert_eq!(got, *want, "{what}"),
                    None => assert!(matches!(got, None | Some(413)), "{what}: {got:?}"),
                }
            }
        }
    }
    // Still serving, and still serving everyone.
    assert_eq!(post(TcpStream::connect(api).unwrap(), small), Some(200));
    let (after, peak) = memory(pid);
    eprintln!(
        "RSS: idle {baseline} KiB, peak under load {peak} KiB (+{} KiB{}), after {after} KiB \
         (+{} KiB)",
        peak.saturating_sub(baseline),
        if peak_was_reset {
            ""
        } else {
            ", peak includes start-up"
        },
        after.saturating_sub(baseline),
    );
    assert!(
        peak.saturating_sub(baseline) < LIMIT_KIB,
        "peak RSS grew by {} KiB (idle {baseline} KiB, peak {peak} KiB)",
        peak.saturating_sub(baseline)
    );
    assert!(after.saturating_sub(baseline) < LIMIT_KIB);
}
