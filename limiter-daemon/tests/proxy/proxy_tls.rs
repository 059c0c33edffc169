//! TLS termination against the daemon binary, with certificates made by `openssl` in the test
//! (a test CA, leaf certificates for `a.test` and `b.test`): `curl --cacert` gets through on
//! TLS 1.2 and 1.3 and the upstream sees `X-Forwarded-Proto: https`; SNI picks between the two
//! certificates; a SIGHUP reload swaps a certificate (signed by a second CA) while a
//! connection made before it goes on being served; a key that does not match its certificate,
//! an expired certificate and one not valid yet are refused at start and at reload (the
//! certificate in force kept), naming the field; the handshake metrics count both results.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use limiter_tests::client::metrics;
use limiter_tests::daemon::config_text;
use limiter_tests::daemon::Daemon;
use limiter_tests::free_addr;
use limiter_tests::tls::ca;
use limiter_tests::tls::leaf;
use limiter_tests::tls::leaf_dated;

/// An upstream answering each request with its head as the body.
fn upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                        buf.drain(..end + 4);
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{head}",
                            head.len()
                        );
                        if conn.write_all(resp.as_bytes()).is_err() {
                            return;
                        }
                    }
                    match conn.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    addr
}

/// `curl` to `https://host:port/path` resolved to the proxy, trusting `ca`; its exit status,
/// body and verbose log.
fn curl(
    dir: &Path,
    proxy: SocketAddr,
    host: &str,
    ca: &str,
    extra: &[&str],
) -> (bool, String, String) {
    let port = proxy.port();
    let out = Command::new("curl")
        .current_dir(dir)
        .args([
            "-sS",
            "-v",
            "--max-time",
            "5",
            "--cacert",
            &format!("{ca}.pem"),
            "--resolve",
        ])
        .arg(format!("{host}:{port}:127.0.0.1"))
        .args(extra)
        .arg(format!("https://{host}:{port}/path"))
        .output()
        .expect("curl is installed");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A keep-alive TLS connection to `a.test` trusting `ca_pem` (rustls).
struct Kept(rustls::StreamOwned<rustls::ClientConnection, TcpStream>);

impl Kept {
    fn open(proxy: SocketAddr, ca_pem: &Path) -> Kept {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls::pki_types::CertificateDer::pem_file_iter(ca_pem).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let conn =
            rustls::ClientConnection::new(Arc::new(cfg), "a.test".try_into().unwrap()).unwrap();
        let tcp = TcpStream::connect(proxy).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Kept(rustls::StreamOwned::new(conn, tcp))
    }

    /// One keep-alive GET; the response's status line.
    fn get(&mut self) -> String {
        self.0
            .write_all(b"GET /kept HTTP/1.1\r\nHost: a.test\r\n\r\n")
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = self.0.read(&mut buf).unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let len: usize = text
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap();
                if got.len() >= end + 4 + len {
                    return text.lines().next().unwrap().to_string();
                }
            }
        }
    }
}

/// The daemon's stderr when it refuses to start with `config`; panics when it starts (still
/// running after 10 s: killed) or exits successfully.
fn refused_at_start(config: &Path) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_limiter-daemon"))
        .args(["run", "--config"])
        .arg(config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} accepted: the daemon started", config.display());
        }
        std::thread::park_timeout(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success(), "{} accepted", config.display());
    err
}

fn config(
    dir: &Path,
    proxy: SocketAddr,
    metrics: SocketAddr,
    up: SocketAddr,
    (a_cert, a_key): (&str, &str),
) -> String {
    config_text(
        dir,
        &format!(
            "[tiers.anon]\nburst = 100\n[admin]\nlisten = \"\"\n[http]\ntls_listen = [\"{proxy}\"]\n\
             upstream = \"http://{up}\"\n[[http.tls]]\ncert_file = \"{d}/{a_cert}\"\nkey_file = \"{d}/{a_key}\"\n\
             [[http.tls]]\ncert_file = \"{d}/b.pem\"\nkey_file = \"{d}/b.key\"\n\
             [metrics]\nlisten = \"{metrics}\"\n",
            d = dir.display()
        ),
    )
}

#[test]
fn tls_at_the_edge() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    ca(p, "ca1");
    ca(p, "ca2");
    leaf(p, "ca1", "a", "a.test", "DNS:a.test");
    leaf(p, "ca1", "b", "b.test", "DNS:b.test");
    leaf(p, "ca2", "a2", "a.test", "DNS:a.test");
    // a.test's certificates of 2020 (expired) and of 2099 (not valid yet).
    leaf_dated(
        p,
        "ca1",
        "old",
        "a.test",
        "DNS:a.test",
        "20200101000000Z",
        "20200102000000Z",
    );
    leaf_dated(
        p,
        "ca1",
        "later",
        "a.test",
        "DNS:a.test",
        "20990101000000Z",
        "20990102000000Z",
    );
    let up = upstream();
    let (proxy, metrics_at) = (free_addr(), free_addr());

    // Refused at start, naming the field: a key that is not the certificate's, an expired
    // certificate, one not valid yet.
    for (files, field, why) in [
        (
            ("a.pem", "b.key"),
            "http.tls[0].key_file",
            "is not the key of",
        ),
        (
            ("old.pem", "old.key"),
            "http.tls[0].cert_file",
            "expired on",
        ),
        (
            ("later.pem", "later.key"),
            "http.tls[0].cert_file",
            "is not valid before",
        ),
    ] {
        std::fs::write(p.join("bad.toml"), config(p, proxy, metrics_at, up, files)).unwrap();
        let err = refused_at_start(&p.join("bad.toml"));
        assert!(err.contains(field) && err.contains(why), "{files:?}: {err}");
    }

    let mut d = Daemon::run(
        p,
        &config(p, proxy, metrics_at, up, ("a.pem", "a.key")),
        &[],
        proxy,
    );

    // Through on TLS 1.3 and 1.2; the upstream is told the client came over https.
    for versions in [&["--tlsv1.3"][..], &["--tlsv1.2", "--tls-max", "1.2"][..]] {
        let (ok, body, log) = curl(p, proxy, "a.test", "ca1", versions);
        assert!(ok, "{log}");
        assert!(body.starts_with("get /path http/1.1"), "{body}");
        assert!(body.contains("x-forwarded-proto: https"), "{body}");
        assert!(log.contains("subject: CN=a.test"), "{log}");
    }
    // SNI picks b.test's certificate (curl checks the name).
    let (ok, _, log) = curl(p, proxy, "b.test", "ca1", &[]);
    assert!(ok && log.contains("subject: CN=b.test"), "{log}");

    // A connection made before the reload.
    let mut kept = Kept::open(proxy, &p.join("ca1.pem"));
    assert_eq!(kept.get(), "HTTP/1.1 200 OK");

    // Reload: a.test's files now hold a certificate from the second CA.
    std::fs::copy(p.join("a2.pem"), p.join("a.pem")).unwrap();
    std::fs::copy(p.join("a2.key"), p.join("a.key")).unwrap();
    d.signal(libc::SIGHUP);
    d.wait_log("config reload applied", 1);
    let (ok, _, log) = curl(p, proxy, "a.test", "ca2", &[]);
    assert!(ok, "{log}");
    let (ok, _, _) = curl(p, proxy, "a.test", "ca1", &[]);
    assert!(!ok, "the old certificate is still served");
    assert_eq!(
        kept.get(),
        "HTTP/1.1 200 OK",
        "the connection made before the reload"
    );

    // A mismatched key at reload: refused, naming the field; the certificate in force stays.
    // So is an expired certificate, and one not valid yet.
    for (n, (files, field)) in [
        (("a.pem", "b.key"), "http.tls[0].key_file"),
        (("old.pem", "old.key"), "http.tls[0].cert_file"),
        (("later.pem", "later.key"), "http.tls[0].cert_file"),
    ]
    .into_iter()
    .enumerate()
    {
        d.rewrite(&config(p, proxy, metrics_at, up, files));
        d.signal(libc::SIGHUP);
        let log = d.wait_log("config reload refused", n + 1);
        let last = log.lines().rfind(|l| l.contains("config reload refused"));
        assert!(last.is_some_and(|l| l.contains(field)), "{files:?}: {log}");
        let (ok, _, log) = curl(p, proxy, "a.test", "ca2", &[]);
        assert!(ok, "{files:?}: {log}");
    }

    let m = metrics(metrics_at);
    let count = |label: &str| -> u64 {
        m.lines()
            .find_map(|l| {
                l.strip_prefix(&format!(
                    "limiter_tls_handshakes_total{{result=\"{label}\"}} "
                ))?
                .parse()
                .ok()
            })
            .unwrap_or_else(|| panic!("no {label} in\n{m}"))
    };
    assert!(count("ok") >= 6, "{m}");
    assert!(count("failed") >= 1, "{m}");
}
