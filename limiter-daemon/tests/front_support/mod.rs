//! What the front-end tests share: the real engine (embedded store, manual clock) behind the
//! daemon's API, and a raw HTTP/1.1 client that connects from a chosen loopback address, so
//! two clients of one front end are two addresses.

#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use limiter_daemon::clock::ManualClock;
use limiter_daemon::config::{Config, EnvMap};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::http_support::{manual_engine, settings, start, Running};

/// 2026-11-29T10:00:30Z.
pub const T0: u64 = 1_795_946_430_000;

/// Anonymous burst 3 a minute; `/free` is never metered (a route rule the front end's
/// original-path field must select).
pub const CONFIG: &str = r#"
[tiers.anon]
burst = 3
hourly = 100
[[routes]]
prefix = "/free"
limits = []
"#;

pub struct World {
    pub d: Running,
    _state: tempfile::TempDir,
    _clock: ManualClock,
}

/// The daemon's API with the real engine; only 127.0.0.1 (the front end) is a trusted peer,
/// so 127.0.0.2 and 127.0.0.3 are clients.
pub async fn world(http_extra: &str) -> World {
    world_with("", None, http_extra).await
}

/// [`world`] with `config_extra` after [`CONFIG`] and the proxy forwarding to `upstream`.
pub async fn world_with(
    config_extra: &str,
    upstream: Option<SocketAddr>,
    http_extra: &str,
) -> World {
    let state = tempfile::tempdir().unwrap();
    let text = format!(
        "{CONFIG}\n{config_extra}\n[store]\nstate_dir = \"{}\"\n",
        state.path().display()
    );
    let cfg = Config::from_toml_str(&text, Path::new("test.toml"), &EnvMap::new()).unwrap();
    let clock = ManualClock::new(T0);
    let engine = manual_engine(cfg, &clock, T0);
    let extra = format!("trusted_peers = [\"127.0.0.1/32\"]\n{http_extra}");
    let mut http = settings(upstream, &extra);
    // As the whole file does: PROXY headers are believed from `[identity] trusted_proxies`.
    http.proxy_protocol_peers = engine.config().identity.trusted_proxies.clone();
    let d = start(http, engine).await;
    World {
        d,
        _state: state,
        _clock: clock,
    }
}

pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn header(&self, name: &str) -> &str {
        self.get(name)
            .unwrap_or_else(|| panic!("header {name} missing in {:?}", self.headers))
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
}

/// One request from `from` to `to` over a fresh connection (`Connection: close`), read to the
/// end. Bodies are small; a chunked one is joined from its data lines.
pub async fn request(
    from: IpAddr,
    to: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> Answer {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(from, 0)).unwrap();
    let mut s = sock.connect(to).await.unwrap();
    let mut req = format!("{method} {target} HTTP/1.1\r\nconnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str("host: app.test\r\n");
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut raw))
        .await
        .expect("answer within 10 s")
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        body.split("\r\n")
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, l)| l)
            .collect::<Vec<_>>()
            .join("")
    } else {
        body.to_string()
    };
    Answer {
        status,
        headers,
        body,
    }
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}
