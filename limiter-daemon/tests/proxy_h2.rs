//! HTTP/2 on the proxy listeners against the daemon binary, one daemon for every check (a
//! plain listener and a TLS one with a certificate made by `openssl` in the test; callers told
//! apart by their loopback source address 127.0.0.N):
//! - `curl --http2-prior-knowledge` and `curl --http2` over TLS (ALPN h2) get HTTP/2 answers
//!   with the same rate-limit fields as an HTTP/1.1 request; no `Connection` field;
//! - `h2load` with prior knowledge and over TLS: every stream succeeds under the budget, and
//!   past the burst the extra streams get 429s carrying the RateLimit fields;
//! - a client opening and cancelling 10,000 streams (the `h2` crate) has its connections
//!   closed by hyper's rapid-reset guard, is metered like a burst (its next request is
//!   refused), does not take the daemon down, another client is served, and the resets are
//!   counted.

mod ops_support;
mod tls_support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ops_support::*;

const BURST: u64 = 50;

/// `curl -sS -v -D -` with `args`; (success, response heads, verbose log).
fn curl(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("curl")
        .current_dir(dir)
        .args(["-sS", "-v", "--max-time", "5", "-o", "/dev/null", "-D", "-"])
        .args(args)
        .output()
        .expect("curl is installed");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_ascii_lowercase(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The rate-limit fields of a response head, `t=`/`reset` values (seconds left) cut off.
fn limit_fields(head: &str) -> Vec<String> {
    let mut v: Vec<String> = head
        .lines()
        .filter(|l| l.starts_with("ratelimit") || l.starts_with("x-ratelimit"))
        .filter(|l| !l.starts_with("x-ratelimit-reset"))
        .map(|l| {
            l.trim()
                .split(", ")
                .map(|item| item.split(";t=").next().unwrap().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect();
    v.sort();
    v
}

/// `h2load` with `args`; (succeeded 2xx, 4xx, the whole report).
fn h2load(args: &[&str]) -> (u64, u64, String) {
    let out = Command::new("h2load")
        .args(args)
        .output()
        .expect("h2load is installed (nghttp2-client, scripts/setup.sh)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let codes = text
        .lines()
        .find_map(|l| l.strip_prefix("status codes: "))
        .unwrap_or_else(|| panic!("no status codes in {text}"));
    let num = |what: &str| -> u64 {
        codes
            .split(", ")
            .find_map(|p| p.strip_suffix(what))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    (num(" 2xx"), num(" 4xx"), text)
}

fn counter(m: &str, name: &str) -> u64 {
    m.lines()
        .find_map(|l| l.strip_prefix(&format!("limiter_{name} "))?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{m}"))
}

/// Opens `n` streams from `from`, resetting each as soon as its HEADERS are out, on a new
/// connection whenever the daemon closes one; (streams sent, connections used).
fn rapid_reset(proxy: SocketAddr, from: &str, n: usize) -> (usize, usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let (mut sent, mut conns) = (0, 0);
        while sent < n {
            conns += 1;
            assert!(conns <= 2000, "{sent} streams over {conns} connections");
            let sock = tokio::net::TcpSocket::new_v4().unwrap();
            sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
            let tcp = sock.connect(proxy).await.unwrap();
            let Ok((sender, conn)) = h2::client::handshake(tcp).await else {
                continue;
            };
            let conn = tokio::spawn(conn);
            let mut sender = Some(sender);
            while sent < n {
                let Some(Ok(mut ready)) = (match sender.take() {
                    Some(s) => Some(s.ready().await),
                    None => None,
                }) else {
                    break;
                };
                let req = http::Request::get(format!("http://{proxy}/reset"))
                    .body(())
                    .unwrap();
                let Ok((resp, mut stream)) = ready.send_request(req, false) else {
                    break;
                };
                // Lets the connection task write the HEADERS first: reset before that, the h2
                // client drops the stream without a frame.
                tokio::task::yield_now().await;
                stream.send_reset(h2::Reason::CANCEL);
                drop(resp);
                sender = Some(ready);
                sent += 1;
            }
            drop(sender);
            let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
        }
        (sent, conns)
    })
}

#[test]
fn http2_on_the_proxy_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    // `ca.pem`, and `a.pem`/`a.key` for DNS `a.test` signed by it.
    tls_support::ca(p, "ca");
    tls_support::leaf(p, "ca", "a", "a.test", "DNS:a.test");
    let up = Upstream::start();
    let (plain, tls, metrics_at) = (free_addr(), free_addr(), free_addr());
    let text = config_text(
        p,
        &format!(
            "[tiers.anon]\nburst = {BURST}\n[admin]\nlisten = \"\"\n[http]\n\
             proxy_listen = [\"{plain}\"]\ntls_listen = [\"{tls}\"]\nupstream = \"http://{}\"\n\
             [[http.tls]]\ncert_file = \"{d}/a.pem\"\nkey_file = \"{d}/a.key\"\n\
             [metrics]\nlisten = \"{metrics_at}\"\n",
            up.addr,
            d = p.display()
        ),
    );
    let mut d = Daemon::start(p, &text, &[], plain);
    d.wait_listening(tls);
    let plain_url = format!("http://{plain}/page");
    let resolve = format!("a.test:{}:127.0.0.1", tls.port());
    let tls_url = format!("https://a.test:{}/page", tls.port());

    // The same rate-limit fields over HTTP/1.1, h2c and h2 over TLS (a fresh caller each).
    let (ok, h1, log) = curl(p, &["--interface", "127.0.0.2", "--http1.1", &plain_url]);
    assert!(ok && h1.starts_with("http/1.1 200"), "{h1}{log}");
    let (ok, h2c, log) = curl(
        p,
        &[
            "--interface",
            "127.0.0.3",
            "--http2-prior-knowledge",
            &plain_url,
        ],
    );
    assert!(ok && h2c.starts_with("http/2 200"), "{h2c}{log}");
    let (ok, h2s, log) = curl(
        p,
        &[
            "--interface",
            "127.0.0.4",
            "--http2",
            "--cacert",
            "ca.pem",
            "--resolve",
            &resolve,
            &tls_url,
        ],
    );
    assert!(ok && h2s.starts_with("http/2 200"), "{h2s}{log}");
    assert!(log.contains("ALPN: server accepted h2"), "{log}");
    let fields = limit_fields(&h1);
    assert!(fields.len() >= 3, "{h1}");
    assert!(
        fields.iter().any(|f| f.starts_with("ratelimit-policy:")),
        "{h1}"
    );
    assert_eq!(limit_fields(&h2c), fields, "h2c vs HTTP/1.1");
    assert_eq!(limit_fields(&h2s), fields, "h2 over TLS vs HTTP/1.1");
    for head in [&h2c, &h2s] {
        assert!(!head.contains("\nconnection:"), "{head}");
    }

    // h2load from 127.0.0.1: under the budget every stream succeeds, with prior knowledge
    // and over TLS; past the burst the rest are 429s.
    let (ok2, bad, report) = h2load(&["-n", "20", "-c", "2", "-m", "10", &plain_url]);
    assert_eq!((ok2, bad), (20, 0), "{report}");
    let (ok2, bad, report) = h2load(&[
        "-n",
        "20",
        "-c",
        "2",
        "-m",
        "10",
        &format!("https://127.0.0.1:{}/page", tls.port()),
    ]);
    assert!(report.contains("Application protocol: h2"), "{report}");
    assert_eq!((ok2, bad), (20, 0), "{report}");
    let (ok2, bad, report) = h2load(&["-n", "40", "-c", "1", "-m", "10", &plain_url]);
    // 10 left of the burst, plus what refilled meanwhile (under one a second).
    assert_eq!(ok2 + bad, 40, "{report}");
    assert!((10..=15).contains(&ok2), "{report}");
    // The 429 stream carries the fields an HTTP/1.1 429 does.
    let (_, head, log) = curl(p, &["--http2-prior-knowledge", &plain_url]);
    assert!(head.starts_with("http/2 429"), "{head}{log}");
    assert!(
        head.contains("\nx-ratelimit-remaining: 0") && head.contains("\nretry-after:"),
        "{head}"
    );
    let (_, h1, _) = curl(p, &["--http1.1", &plain_url]);
    assert!(h1.starts_with("http/1.1 429"), "{h1}");
    assert_eq!(
        limit_fields(&head),
        limit_fields(&h1),
        "429 over h2 vs HTTP/1.1"
    );

    // Rapid reset from 127.0.0.5 (10,000 streams opened and cancelled at once): hyper's guard
    // closes its connections (it has to open many), the streams that were served were
    // decided and counted like a burst (its next request is refused), the daemon stays up and
    // another caller is served.
    let (sent, conns) = rapid_reset(plain, "127.0.0.5", 10_000);
    assert!(
        conns > 1,
        "no connection was closed over {sent} reset streams"
    );
    assert!(d.running(), "the daemon died under rapid reset");
    let (_, head, log) = curl(
        p,
        &[
            "--interface",
            "127.0.0.5",
            "--http2-prior-knowledge",
            &plain_url,
        ],
    );
    assert!(
        head.starts_with("http/2 429"),
        "after {sent} resets: {head}{log}"
    );
    let (ok, head, log) = curl(
        p,
        &[
            "--interface",
            "127.0.0.6",
            "--http2-prior-knowledge",
            &plain_url,
        ],
    );
    assert!(ok && head.starts_with("http/2 200"), "{head}{log}");

    let m = metrics(metrics_at);
    assert!(counter(&m, "h2_streams_total") >= 80 + 3, "{m}");
    let resets = counter(&m, "h2_stream_resets_total");
    eprintln!("rapid reset: {sent} streams over {conns} connections; resets counted {resets}");
    // A connection's last streams may be reset after the daemon stopped reading it.
    assert!(resets >= sent as u64 / 2, "{sent} sent, {resets} counted");
}
