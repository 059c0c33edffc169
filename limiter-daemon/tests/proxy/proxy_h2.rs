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

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use limiter_tests::client::metrics;
use limiter_tests::daemon::config_text;
use limiter_tests::daemon::Daemon;
use limiter_tests::free_addr;
use limiter_tests::upstream::Upstream;

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

/// [`limiter_tests::h2::rapid_reset`] of `n` streams, to the end.
fn rapid_reset(proxy: SocketAddr, from: &str, n: usize) -> (usize, usize) {
    let (sent, conns) = limiter_tests::h2::rapid_reset(proxy, from, n, &AtomicBool::new(false));
    assert!(conns <= 2000, "{sent} streams over {conns} connections");
    (sent, conns)
}

#[test]
fn http2_on_the_proxy_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    // `ca.pem`, and `a.pem`/`a.key` for DNS `a.test` signed by it.
    limiter_tests::tls::ca(p, "ca");
    limiter_tests::tls::leaf(p, "ca", "a", "a.test", "DNS:a.test");
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
    let mut d = Daemon::run(p, &text, &[], plain);
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

/// One HTTP/2 frame: `kind`, `flags`, stream `id`, `payload` (RFC 9113 §4.1).
fn frame(kind: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Sends the preface, an empty SETTINGS and `flood` from `from`, then reads until the daemon
/// closes the connection (within 10 s, else it panics naming `what`).
fn flood_until_closed(proxy: SocketAddr, from: &str, what: &str, flood: &[u8]) {
    use std::io::{Read, Write};
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let src: SocketAddr = format!("{from}:0").parse().unwrap();
    sock.bind(&src.into()).unwrap();
    sock.connect(&proxy.into()).unwrap();
    let mut tcp: std::net::TcpStream = sock.into();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    wire.extend(frame(0x4, 0, 0, &[]));
    wire.extend_from_slice(flood);
    // The daemon may close before it has read everything: a failed write is that.
    let _ = tcp.write_all(&wire);
    let mut buf = [0u8; 65536];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("{what}: the connection was not closed: {e}"),
        }
    }
}

/// HTTP/2 abuse on its own daemon, with budgets far above the 10,000 streams sent, so only
/// the abuse itself can strike:
/// - rapid reset from 127.0.0.5 (10,000 streams opened and cancelled): hyper's guard closes
///   its connections and the first such close strikes it (a lockout, as a burst makes),
///   while 127.0.0.6 is served all along;
/// - a CONTINUATION flood (127.0.0.7: header fragments past the header-list size, h2's own
///   limit), floods of PING (127.0.0.8), SETTINGS (127.0.0.9), PING ACK (127.0.0.11),
///   WINDOW_UPDATE (127.0.0.12) and an unknown frame type (127.0.0.13), past the bound on
///   frames that are not requests: each connection is closed, each caller struck, and the
///   daemon serves 127.0.0.10 afterwards.
#[test]
fn http2_abuse_is_struck_and_floods_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let up = Upstream::start();
    let (plain, metrics_at) = (free_addr(), free_addr());
    let text = config_text(
        p,
        &format!(
            "[tiers.anon]\nburst = 60000\nhourly = 1000000\n[quota]\nanon = 1000000\n\
             [networks.prefix]\nenabled = false\n[admin]\nlisten = \"\"\n[http]\n\
             proxy_listen = [\"{plain}\"]\nupstream = \"http://{}\"\n\
             [metrics]\nlisten = \"{metrics_at}\"\n",
            up.addr,
        ),
    );
    let mut d = Daemon::run(p, &text, &[], plain);
    let url = format!("http://{plain}/page");
    let get = |from: &str| curl(p, &["--interface", from, "--http2-prior-knowledge", &url]);

    let flood = std::thread::spawn(move || rapid_reset(plain, "127.0.0.5", 10_000));
    let mut served = 0;
    while !flood.is_finished() || served == 0 {
        let (ok, head, log) = get("127.0.0.6");
        assert!(
            ok && head.starts_with("http/2 200"),
            "during the flood: {head}{log}"
        );
        served += 1;
    }
    let (sent, conns) = flood.join().unwrap();
    eprintln!("rapid reset: {sent} streams over {conns} connections; 127.0.0.6 served {served}");
    let log = d.wait_log("lockout_made", 1);
    assert!(
        log.lines()
            .any(|l| l.contains("lockout_made") && l.contains("127.0.0.5")),
        "{log}"
    );
    let (_, head, log) = get("127.0.0.5");
    assert!(
        head.starts_with("http/2 429"),
        "after the flood: {head}{log}"
    );

    // CONTINUATION: a HEADERS frame without END_HEADERS, then fragments holding one valid
    // field each (`x-a: aaaa`, a literal), far more frames than the header list needs.
    let field = [0x00, 3, b'x', b'-', b'a', 4, b'a', b'a', b'a', b'a'];
    let mut cont = frame(0x1, 0x1, 1, &[0x82, 0x86, 0x84]);
    for _ in 0..1000 {
        cont.extend(frame(0x9, 0, 1, &field));
    }
    flood_until_closed(plain, "127.0.0.7", "CONTINUATION flood", &cont);
    let pings: Vec<u8> = (0..10_000u64)
        .flat_map(|i| frame(0x6, 0, 0, &i.to_be_bytes()))
        .collect();
    flood_until_closed(plain, "127.0.0.8", "PING flood", &pings);
    let settings: Vec<u8> = (0..10_000).flat_map(|_| frame(0x4, 0, 0, &[])).collect();
    flood_until_closed(plain, "127.0.0.9", "SETTINGS flood", &settings);
    // Issue 35, D6: the frames that cost work without being a request, acknowledgements and
    // flow control included, are under the same bound (a million PING ACKs were kept).
    let acks: Vec<u8> = (0..10_000u64)
        .flat_map(|i| frame(0x6, 0x1, 0, &i.to_be_bytes()))
        .collect();
    flood_until_closed(plain, "127.0.0.11", "PING ACK flood", &acks);
    let updates: Vec<u8> = (0..10_000)
        .flat_map(|_| frame(0x8, 0, 0, &[0, 0, 0, 1]))
        .collect();
    flood_until_closed(plain, "127.0.0.12", "WINDOW_UPDATE flood", &updates);
    let unknown: Vec<u8> = (0..10_000)
        .flat_map(|_| frame(0x20, 0, 0, &[7; 4]))
        .collect();
    flood_until_closed(plain, "127.0.0.13", "unknown frame type flood", &unknown);

    let log = d.wait_log("lockout_made", 7);
    for ip in [
        "127.0.0.7",
        "127.0.0.8",
        "127.0.0.9",
        "127.0.0.11",
        "127.0.0.12",
        "127.0.0.13",
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains("lockout_made") && l.contains(ip)),
            "{ip} not struck: {log}"
        );
    }
    assert!(d.running(), "the daemon died under the floods");
    let (ok, head, log) = get("127.0.0.10");
    assert!(ok && head.starts_with("http/2 200"), "{head}{log}");
    let m = metrics(metrics_at);
    assert!(counter(&m, "h2_abuse_closes_total") >= 7, "{m}");
}

/// An upstream answering `GET /big/N` with N bytes and anything else with 2 (keep-alive, a
/// thread per connection).
fn big_upstream() -> SocketAddr {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            std::thread::spawn(move || {
                let (mut buf, mut chunk, block) = (Vec::new(), [0u8; 8192], [b'x'; 65536]);
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        buf.drain(..end + 4);
                        let mut left: usize = head
                            .split(' ')
                            .nth(1)
                            .and_then(|t| t.strip_prefix("/big/")?.parse().ok())
                            .unwrap_or(2);
                        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {left}\r\n\r\n");
                        if c.write_all(head.as_bytes()).is_err() {
                            return;
                        }
                        while left > 0 {
                            let k = left.min(block.len());
                            if c.write_all(&block[..k]).is_err() {
                                return;
                            }
                            left -= k;
                        }
                    }
                    match c.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    addr
}

/// How a connection held by [`hold_open`] ended.
#[derive(Debug)]
struct Held {
    /// From the connection's start to the daemon's close.
    lived: Duration,
    /// From the last response frame (HEADERS or DATA) to the close; `None`: none came.
    idle: Option<Duration>,
    /// The daemon's PINGs answered.
    pings: usize,
}

/// A byte stream to the daemon: plain TCP, or TLS over it.
trait Conn: std::io::Read + std::io::Write {}
impl<T: std::io::Read + std::io::Write> Conn for T {}

/// Connects from `from`, over TLS with ALPN `h2` trusting `tls` (a CA file) when given, sends
/// the preface, an empty SETTINGS and `opening`, then reads what the daemon sends until it
/// closes the connection, acknowledging its SETTINGS and PINGs when `answer` (else sending
/// nothing more: a frame after a half-sent header block would be a protocol error); panics
/// naming `what` when that takes over 6 s.
fn hold_open(
    proxy: SocketAddr,
    tls: Option<&Path>,
    from: &str,
    what: &str,
    opening: &[u8],
    answer: bool,
) -> Held {
    use std::io::{ErrorKind, Read, Write};
    use std::time::Instant;
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let src: SocketAddr = format!("{from}:0").parse().unwrap();
    sock.bind(&src.into()).unwrap();
    let start = Instant::now();
    sock.connect(&proxy.into()).unwrap();
    let mut tcp: std::net::TcpStream = sock.into();
    let mut conn: Box<dyn Conn> = match tls {
        None => {
            tcp.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            Box::new(tcp)
        }
        Some(ca) => {
            use rustls::pki_types::pem::PemObject;
            let mut roots = rustls::RootCertStore::empty();
            for c in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
                roots.add(c.unwrap()).unwrap();
            }
            let mut cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
            cfg.alpn_protocols = vec![b"h2".to_vec()];
            let mut tls = rustls::ClientConnection::new(
                std::sync::Arc::new(cfg),
                "a.test".try_into().unwrap(),
            )
            .unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            while tls.is_handshaking() {
                tls.complete_io(&mut tcp).unwrap();
            }
            assert_eq!(tls.alpn_protocol(), Some(&b"h2"[..]), "{what}");
            tcp.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            Box::new(rustls::StreamOwned::new(tls, tcp))
        }
    };
    let tcp = &mut conn;
    let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    wire.extend(frame(0x4, 0, 0, &[]));
    wire.extend_from_slice(opening);
    tcp.write_all(&wire).unwrap();
    let (mut buf, mut chunk) = (Vec::new(), [0u8; 65536]);
    let (mut pings, mut answered) = (0, None);
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(6),
            "{what} from {from}: still open after 6 s ({pings} PINGs answered)"
        );
        match tcp.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            // A close without TLS's close_notify is an unexpected EOF.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof
                ) =>
            {
                break
            }
            Err(e) => panic!("{what}: {e}"),
        }
        while buf.len() >= 9 {
            let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
            if buf.len() < 9 + len {
                break;
            }
            let (kind, ack) = (buf[3], buf[4] & 0x1);
            let payload = buf[9..9 + len].to_vec();
            buf.drain(..9 + len);
            // The daemon may have closed meanwhile: a failed write is that.
            match (kind, ack) {
                (0x0 | 0x1, _) => answered = Some(Instant::now()),
                (0x4, 0) if answer => {
                    let _ = tcp.write_all(&frame(0x4, 0x1, 0, &[]));
                }
                (0x6, 0) if answer => {
                    pings += 1;
                    let _ = tcp.write_all(&frame(0x6, 0x1, 0, &payload));
                }
                _ => {}
            }
        }
    }
    Held {
        lived: start.elapsed(),
        idle: answered.map(|at| at.elapsed()),
        pings,
    }
}

/// Issue 35, D2: `header_read_timeout` bounds HTTP/2 as it bounds HTTP/1.1 (1 s here, the
/// daemon's PINGs every 300 ms), against 50 connections held at once:
/// - a HEADERS frame without END_HEADERS (its CONTINUATION never sent), and a HEADERS frame
///   cut in its payload: closed at the timeout of the connection's start;
/// - the preface and SETTINGS, then nothing, answering the daemon's PINGs or not: closed
///   at the timeout (GOAWAY, then at most a second for the client to go);
/// - a request answered, then only the daemon's PINGs answered: closed at the timeout of the
///   answer, the PINGs notwithstanding;
///
/// while what is not idle stays up, on the same daemon: a download read slowly for longer
/// than the timeout, and (D6: the WINDOW_UPDATEs a download owes are not a flood) large
/// downloads by `curl` and by `h2load` with 64 KiB windows, thousands of WINDOW_UPDATEs each.
#[test]
fn http2_heads_and_idle_connections_are_bounded_by_the_header_read_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    limiter_tests::tls::ca(p, "ca");
    limiter_tests::tls::leaf(p, "ca", "a", "a.test", "DNS:a.test");
    let up = big_upstream();
    let (plain, tls) = (free_addr(), free_addr());
    let text = config_text(
        p,
        &format!(
            "[tiers.anon]\nburst = 60000\nhourly = 1000000\n[quota]\nanon = 1000000\n\
             [networks.prefix]\nenabled = false\n[admin]\nlisten = \"\"\n[http]\n\
             proxy_listen = [\"{plain}\"]\ntls_listen = [\"{tls}\"]\n\
             upstream = \"http://{up}\"\n\
             header_read_timeout = \"1s\"\nh2_keep_alive_interval = \"300ms\"\n\
             [[http.tls]]\ncert_file = \"{d}/a.pem\"\nkey_file = \"{d}/a.key\"\n",
            d = p.display()
        ),
    );
    let mut d = Daemon::run(p, &text, &[], plain);
    d.wait_listening(tls);
    let ca = p.join("ca.pem");
    let timeout = Duration::from_secs(1);
    // HPACK: GET, http, /, then `:authority: a` (a literal with an indexed name).
    let get = [0x82, 0x86, 0x84, 0x41, 1, b'a'];
    let unfinished = frame(0x1, 0x0, 1, &get);
    let cut = frame(0x1, 0x5, 1, &[0x82; 40])[..20].to_vec();
    let request = frame(0x1, 0x5, 1, &get);
    let kinds: [(&str, Vec<u8>, bool); 5] = [
        ("HEADERS without END_HEADERS", unfinished, false),
        ("HEADERS cut in its payload", cut, false),
        ("preface and SETTINGS only", Vec::new(), false),
        ("preface and SETTINGS, answering PINGs", Vec::new(), true),
        (
            "a request answered, then only PINGs answered",
            request,
            true,
        ),
    ];
    // Each kind ten times over plain TCP, and three times over TLS.
    let mut held = Vec::new();
    for (k, (what, opening, answer)) in kinds.into_iter().enumerate() {
        for i in 0..13 {
            let (at, ca, net) = match i {
                0..10 => (plain, None, 20),
                _ => (tls, Some(ca.clone()), 30),
            };
            let (from, opening) = (format!("127.0.{}.{}", net + k, 1 + i), opening.clone());
            held.push(std::thread::spawn(move || {
                let held = hold_open(at, ca.as_deref(), &from, what, &opening, answer);
                (what, held)
            }));
        }
    }

    // Meanwhile, a download read at 2 MiB a second for 2 s (its stream open all along, its
    // connection never idle), with 64 KiB windows.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    const SLOW: usize = 4 << 20;
    let (got, took) = rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(plain).await.unwrap();
        let (send, conn) = h2::client::Builder::new()
            .initial_window_size(65_535)
            .handshake::<_, bytes::Bytes>(tcp)
            .await
            .unwrap();
        let conn = tokio::spawn(conn);
        let mut send = send.ready().await.unwrap();
        let req = http::Request::get(format!("http://{plain}/big/{SLOW}"))
            .body(())
            .unwrap();
        let (resp, _) = send.send_request(req, true).unwrap();
        let started = std::time::Instant::now();
        let mut body = resp.await.unwrap().into_body();
        let (mut got, mut paced) = (0, 0);
        while let Some(chunk) = body.data().await {
            let chunk = chunk.expect("the slow download was cut off");
            got += chunk.len();
            body.flow_control().release_capacity(chunk.len()).unwrap();
            // A slow reader: 256 KiB every 125 ms.
            if got >= paced + (256 << 10) {
                paced = got;
                tokio::time::sleep(Duration::from_millis(125)).await;
            }
        }
        let took = started.elapsed();
        drop(send);
        let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
        (got, took)
    });
    assert_eq!(got, SLOW);
    assert!(took > timeout, "the slow download took only {took:?}");

    for h in held {
        let (what, held) = h.join().unwrap();
        eprintln!("{what}: {held:?}");
        // Not before the timeout; at it, plus the second a GOAWAY waits for its PING answer,
        // and a margin for a loaded machine.
        assert!(held.lived >= timeout, "{what}: closed early, {held:?}");
        assert!(held.lived <= timeout * 4, "{what}: closed late, {held:?}");
        if what.starts_with("a request") {
            let idle = held.idle.expect("the request was answered");
            // The answer's last frame may reach this thread a little after the stream ended.
            assert!(
                idle >= timeout / 2 && idle <= timeout * 3,
                "{what}: {held:?}"
            );
        }
        if what.contains("answering PINGs") {
            assert!(held.pings >= 1, "{what}: the daemon never PINGed, {held:?}");
        }
    }

    // Large downloads by real clients, with their WINDOW_UPDATEs: curl, then h2load with
    // 64 KiB stream and connection windows (an update per 32 KiB or so of each).
    let big = 64 << 20;
    let out = Command::new("curl")
        .args([
            "-sS",
            "--http2-prior-knowledge",
            "--max-time",
            "60",
            "-o",
            "/dev/null",
        ])
        .args(["-w", "%{http_version} %{size_download}"])
        .arg(format!("http://{plain}/big/{big}"))
        .output()
        .expect("curl is installed");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        said,
        format!("2 {big}"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, bad, report) = h2load(&[
        "-n",
        "4",
        "-c",
        "1",
        "-m",
        "2",
        "-w",
        "16",
        "-W",
        "16",
        &format!("http://{plain}/big/{}", 16 << 20),
    ]);
    assert_eq!((ok, bad), (4, 0), "{report}");
    assert!(d.running());
    let log = d.logs();
    assert!(!log.contains("closed for abuse"), "{log}");
}
