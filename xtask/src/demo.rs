//! The demo upstream `cargo xtask run` starts when nothing listens on the config's
//! `[http] upstream`, so a first `curl` through the proxy is a 200 and not a 502. It answers
//! every request with a short text, on keep-alive connections (the proxy pools them).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

const BODY: &str = "Hello from the demo upstream of `cargo xtask run`.\n";

/// Starts the demo upstream on the config's upstream address when nothing answers there;
/// returns the address it serves (`None`: the config has no upstream on this host, an app is
/// up, or the address cannot be bound).
pub fn start_if_absent(config: &Path) -> Result<Option<SocketAddr>> {
    // Only on this host: an app elsewhere that is down is the operator's to start.
    let Some(addr) = upstream(config)?.filter(|a| a.ip().is_loopback()) else {
        return Ok(None);
    };
    if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
        return Ok(None);
    }
    let listener = match TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("xtask: no demo upstream: binding {addr}: {e}");
            return Ok(None);
        }
    };
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || serve(conn));
        }
    });
    Ok(Some(addr))
}

/// `[http] upstream` of the config (`http://host:port`), resolved.
fn upstream(config: &Path) -> Result<Option<SocketAddr>> {
    let text =
        std::fs::read_to_string(config).with_context(|| format!("reading {}", config.display()))?;
    let value: toml::Table =
        toml::from_str(&text).with_context(|| format!("parsing {}", config.display()))?;
    let Some(url) = value
        .get("http")
        .and_then(|h| h.get("upstream"))
        .and_then(|u| u.as_str())
    else {
        return Ok(None);
    };
    let authority = url
        .strip_prefix("http://")
        .unwrap_or(url)
        .trim_end_matches('/');
    Ok(authority.to_socket_addrs().ok().and_then(|mut a| a.next()))
}

/// One connection: request heads (a body, when announced, is read and dropped), each answered.
fn serve(conn: TcpStream) {
    let Ok(writer) = conn.try_clone() else { return };
    let mut writer = writer;
    let mut reader = BufReader::new(conn);
    loop {
        let mut length = 0u64;
        let mut line = String::new();
        let mut first = true;
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" || line == "\n" {
                break;
            }
            if !first {
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
            }
            first = false;
        }
        if std::io::copy(&mut (&mut reader).take(length), &mut std::io::sink()).is_err() {
            return;
        }
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{BODY}",
            BODY.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}
