//! TLS material for the tests (the proxy's TLS and HTTP/2 listeners, agents' key directories,
//! Valkey behind stunnel): test certificates made by the real `openssl` in a directory the
//! test owns, a CA and leaves it signs, P-256 keys, valid for two days (or for the dates a
//! test names: [`leaf_dated`]).

use std::path::Path;
use std::process::Command;

/// Runs `openssl args` in `dir`; a failure panics with openssl's own message.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl is installed (scripts/setup.sh)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `<name>.pem` and `<name>.key`: a self-signed CA.
pub fn ca(dir: &Path, name: &str) {
    let (key, pem) = (format!("{name}.key"), format!("{name}.pem"));
    let subject = format!("/CN=Test {name}");
    let mut args = vec!["req", "-x509"];
    args.extend(P256);
    args.extend([
        "-keyout", &key, "-out", &pem, "-days", "2", "-subj", &subject,
    ]);
    openssl(dir, &args);
}

/// `<name>.pem` and `<name>.key`: a leaf named `cn`, for `san` (openssl's subjectAltName
/// value, e.g. `DNS:a.test` or `IP:127.0.0.1,DNS:localhost`), signed by the CA `ca`.
pub fn leaf(dir: &Path, ca: &str, name: &str, cn: &str, san: &str) {
    let ext = format!("{name}.ext");
    std::fs::write(dir.join(&ext), format!("subjectAltName={san}\n")).unwrap();
    let (key, csr, pem) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
    );
    let subject = format!("/CN={cn}");
    let mut args = vec!["req"];
    args.extend(P256);
    args.extend(["-keyout", &key, "-out", &csr, "-subj", &subject]);
    openssl(dir, &args);
    let (ca_pem, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_pem,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &ext,
        ],
    );
}

/// `<name>.pem` and `<name>.key` like [`leaf`], but valid only from `start` to `end`
/// (openssl's `YYYYMMDDHHMMSSZ`), so a test can make an expired or a not yet valid
/// certificate: `openssl ca -startdate/-enddate`, as `openssl x509` (3.0) takes no start date.
pub fn leaf_dated(dir: &Path, ca: &str, name: &str, cn: &str, san: &str, start: &str, end: &str) {
    let (key, csr, pem, ext) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.ext"),
    );
    std::fs::write(dir.join(&ext), format!("subjectAltName={san}\n")).unwrap();
    let subject = format!("/CN={cn}");
    let mut args = vec!["req"];
    args.extend(P256);
    args.extend(["-keyout", &key, "-out", &csr, "-subj", &subject]);
    openssl(dir, &args);
    // `openssl ca` keeps a database and a serial of its own, one per leaf here.
    let db = dir.join(format!("{name}.db"));
    std::fs::create_dir_all(&db).unwrap();
    std::fs::write(db.join("index.txt"), "").unwrap();
    std::fs::write(db.join("serial"), "01\n").unwrap();
    let cnf = format!("{name}.cnf");
    std::fs::write(
        dir.join(&cnf),
        format!(
            "[ca]\ndefault_ca = test\n[test]\ndatabase = {d}/index.txt\nnew_certs_dir = {d}\n\
             serial = {d}/serial\ndefault_md = sha256\npolicy = any\nunique_subject = no\n\
             [any]\ncommonName = supplied\n",
            d = db.display()
        ),
    )
    .unwrap();
    let (ca_pem, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
    openssl(
        dir,
        &[
            "ca",
            "-batch",
            "-notext",
            "-config",
            &cnf,
            "-cert",
            &ca_pem,
            "-keyfile",
            &ca_key,
            "-in",
            &csr,
            "-out",
            &pem,
            "-startdate",
            start,
            "-enddate",
            end,
            "-extfile",
            &ext,
        ],
    );
}

const P256: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// The answer of [`serve_https`]'s handler.
pub type Reply = http::Response<http_body_util::Full<hyper::body::Bytes>>;

/// An HTTPS (HTTP/1.1) server on a free loopback port, on the current tokio runtime, with the
/// leaf `<name>.pem`/`<name>.key` in `dir`; `answer` answers every request. The servers that
/// stand in for agents' directories and published range lists.
pub async fn serve_https(
    dir: &Path,
    name: &str,
    answer: impl Fn(&http::Request<hyper::body::Incoming>) -> Reply + Send + Sync + 'static,
) -> std::net::SocketAddr {
    use std::sync::Arc;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(dir.join(format!("{name}.pem")))
            .unwrap()
            .map(Result::unwrap)
            .collect();
    let key = PrivateKeyDer::from_pem_file(dir.join(format!("{name}.key"))).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, answer) = (acceptor.clone(), Arc::clone(&answer));
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let reply = answer(&req);
                        async move { Ok::<_, std::convert::Infallible>(reply) }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    addr
}
