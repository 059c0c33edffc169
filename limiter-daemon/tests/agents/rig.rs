//! What the signed-agent tests share: a local HTTPS server (a test CA made by `openssl`,
//! `limiter_tests::tls::serve_https`) serving an agent's key directory, a redirect, an
//! oversized body and failures on demand; and Cloudflare's `web-bot-auth` npm signer (0.1.3, installed into the
//! target directory on first use).

#![allow(
    dead_code,
    reason = "each test file uses a different part of this module"
)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

use http::Response;
use http_body_util::Full;
use hyper::body::Bytes;
use limiter_daemon::fetch::agent_directories as fetcher;

pub const WK: &str = "/.well-known/http-message-signatures-directory";

/// What the server serves, and the paths it was asked for.
#[derive(Default)]
pub struct Served {
    pub directory: Mutex<Vec<u8>>,
    /// 200 while 0, else this status for the directory.
    pub fail: AtomicU16,
    pub hits: Mutex<Vec<String>>,
}

impl Served {
    /// How often the directory was asked for.
    pub fn directory_fetches(&self) -> usize {
        self.hits
            .lock()
            .unwrap()
            .iter()
            .filter(|p| *p == WK)
            .count()
    }
}

/// Serves `served` over HTTPS with `dir`'s `srv.pem`/`srv.key` on a loopback port (the
/// harness's server).
pub async fn serve(dir: &Path, served: Arc<Served>) -> SocketAddr {
    limiter_tests::tls::serve_https(dir, "srv", move |req| {
        let path = req.uri().path().to_owned();
        served.hits.lock().unwrap().push(path.clone());
        let r = Response::builder();
        let r = match path.as_str() {
            "/redirect" => r
                .status(302)
                .header("location", WK)
                .body(Full::new(Bytes::new())),
            "/big" => r.body(Full::new(Bytes::from(vec![b' '; 200_000]))),
            WK => match served.fail.load(Ordering::SeqCst) {
                0 => r
                    .header("content-type", fetcher::MEDIA_TYPE)
                    .header("cache-control", "max-age=600")
                    .body(Full::new(Bytes::from(
                        served.directory.lock().unwrap().clone(),
                    ))),
                s => r.status(s).body(Full::new(Bytes::new())),
            },
            _ => r.status(404).body(Full::new(Bytes::new())),
        };
        r.unwrap()
    })
    .await
}

/// The directory the npm signer is installed in (installed on first use).
pub fn npm_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("web-bot-auth-npm");
    if !dir.join("node_modules/web-bot-auth/package.json").is_file() {
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--silent",
                "web-bot-auth@0.1.3",
            ])
            .current_dir(&dir)
            .output()
            .expect("npm must be installed (Node 20, scripts/setup.sh)");
        assert!(
            out.status.success(),
            "npm install: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/web_bot_auth/sign.mjs");
    std::fs::copy(script, dir.join("sign.mjs")).unwrap();
    dir
}

/// Signs a GET of `url` with a fresh key, `Signature-Agent: agent`: the fields and the key's
/// JWK `x`, as JSON (`signature`, `input`, `agent`, `x`).
pub fn npm_sign(dir: &Path, url: &str, agent: &str) -> serde_json::Value {
    npm_sign_with(dir, url, agent, None)
}

/// [`npm_sign`] with the private key kept in `keyfile` (made on first use): one agent, one key.
pub fn npm_sign_with(
    dir: &Path,
    url: &str,
    agent: &str,
    keyfile: Option<&Path>,
) -> serde_json::Value {
    let out = Command::new("node")
        .args(["sign.mjs", url, agent])
        .args(keyfile)
        .current_dir(dir)
        .output()
        .expect("node must be installed");
    assert!(
        out.status.success(),
        "node: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
