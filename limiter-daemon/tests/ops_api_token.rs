//! The decision API token against the real daemon binary: with `[http] api_token_file` set,
//! `/v1/decide` and `/v1/auth` answer 401 (`WWW-Authenticate: Bearer`, problem+json) without
//! the token or with a wrong one, and decide with it; `check-config` warns on stderr (exit 0)
//! when the API listens off loopback without a token. Slow and idle clients on the API, admin
//! and metrics listeners are cut off by `[http]`'s read timeouts and connection cap, before
//! any token is checked.

mod ops_support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use ops_support::*;

const TOKEN: &str = "ops-test-token-0123456789abcdef";

#[test]
fn decision_api_needs_the_token_when_one_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("api-token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let api = free_addr();
    let text = config_text(
        dir.path(),
        &format!(
            "[admin]\nlisten = \"\"\n[http]\napi_listen = [\"{api}\"]\napi_token_file = {:?}\n[metrics]\nlisten = \"\"\n",
            file.display().to_string()
        ),
    );
    let _d = Daemon::start(dir.path(), &text, &[], api);
    for (auth, status) in [
        (None, 401),
        (Some("wrong-token-0123456789abcdef"), 401),
        (Some(&TOKEN[..TOKEN.len() - 1]), 401),
        (Some(TOKEN), 200),
    ] {
        let a = decide(api, "203.0.113.5", "/x", auth);
        assert_eq!(a.status, status, "{auth:?}: {a:?}");
        if status == 401 {
            assert_eq!(a.header("www-authenticate"), "Bearer");
            assert_eq!(a.header("content-type"), "application/problem+json");
            assert_eq!(a.json()["status"], 401);
        } else {
            assert_eq!(a.json()["action"], "allow");
        }
        let bearer = auth.map(|t| format!("Bearer {t}"));
        let mut h = vec![("x-original-uri", "/x")];
        if let Some(b) = &bearer {
            h.push(("authorization", b.as_str()));
        }
        let a = request(api, "GET", "/v1/auth", &h, "");
        assert_eq!(
            a.status,
            if status == 200 { 204 } else { 401 },
            "/v1/auth {auth:?}: {a:?}"
        );
    }
}

fn check_config(dir: &std::path::Path, http: &str) -> (bool, String) {
    let p = dir.join("check.toml");
    std::fs::write(&p, format!("[kernel]\nmode = \"off\"\n[http]\n{http}")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_limiter-daemon"))
        .arg("check-config")
        .arg(&p)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_config_warns_when_the_api_is_off_loopback_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, err) = check_config(dir.path(), "api_listen = [\"0.0.0.0:8081\"]\n");
    assert!(ok, "{err}");
    assert!(
        err.contains("warning")
            && err.contains("0.0.0.0:8081")
            && err.contains("http.api_token_file"),
        "{err}"
    );
    let (ok, err) = check_config(dir.path(), "api_listen = [\"127.0.0.1:8081\"]\n");
    assert!(ok && !err.contains("warning"), "{err}");
    let file = dir.path().join("api-token");
    std::fs::write(&file, TOKEN).unwrap();
    let (ok, err) = check_config(
        dir.path(),
        &format!(
            "api_listen = [\"0.0.0.0:8081\"]\napi_token_file = {:?}\n",
            file.display().to_string()
        ),
    );
    assert!(ok && !err.contains("warning"), "{err}");
}

/// Reads what the daemon writes until it closes the connection, writing one byte of `drip`
/// per read that comes back empty-handed (a client trickling its head); `None` if the
/// connection is still open after 10 s (the listeners under test close them after 1 s).
fn until_closed(s: &mut TcpStream, drip: &[u8]) -> Option<Vec<u8>> {
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut got, mut buf, mut sent) = (Vec::new(), [0u8; 4096], 0);
    while Instant::now() < deadline {
        if sent < drip.len() {
            if s.write_all(&drip[sent..=sent]).is_err() {
                return Some(got);
            }
            sent += 1;
        }
        match s.read(&mut buf) {
            Ok(0) => return Some(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Some(got),
        }
    }
    None
}

fn status_of(got: &[u8]) -> String {
    String::from_utf8_lossy(got.get(..12).unwrap_or(got)).into_owned()
}

/// One listener's slow-client checks: `get` a bodyless request, `post` one whose body the
/// listener reads (`None` on the metrics listener, which reads none).
fn slow_clients_are_cut_off(addr: SocketAddr, get: &str, post: Option<&str>) {
    // A head trickled a byte at a time, never finished.
    let mut s = TcpStream::connect(addr).unwrap();
    let drip = format!("{}x-slow: {}", &get[..get.len() - 2], "a".repeat(1000));
    let got = until_closed(&mut s, drip.as_bytes())
        .unwrap_or_else(|| panic!("{addr}: a dripping head kept its connection"));
    assert!(
        !got.starts_with(b"HTTP/1.1 2"),
        "{addr}: {}",
        status_of(&got)
    );

    // Half a body: 408 and closed (the API and admin API read bodies).
    let mut s = TcpStream::connect(addr).unwrap();
    let head = post
        .unwrap_or(get)
        .replace("\r\n\r\n", "\r\ncontent-length: 60000\r\n\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&[b' '; 30_000]).unwrap();
    let got = until_closed(&mut s, b"")
        .unwrap_or_else(|| panic!("{addr}: a half-sent body kept its connection"));
    if post.is_some() {
        assert!(
            got.starts_with(b"HTTP/1.1 408"),
            "{addr}: {}",
            status_of(&got)
        );
    }

    // An idle keep-alive connection after one answered request.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(get.as_bytes()).unwrap();
    let got = until_closed(&mut s, b"")
        .unwrap_or_else(|| panic!("{addr}: an idle keep-alive connection was left open"));
    assert!(got.starts_with(b"HTTP/1.1 "), "{addr}: {}", status_of(&got));

    // Three connections fill the cap; the fourth is refused at once, in the open.
    let held: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let mut s = TcpStream::connect(addr).unwrap();
    let got = until_closed(&mut s, b"").unwrap();
    assert!(
        got.starts_with(b"HTTP/1.1 503"),
        "{addr}: {}",
        status_of(&got)
    );
    drop(held);
    // Their places come back once the daemon has seen them close.
    eventually("a connection under the cap again", || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(
            get.replace("\r\n\r\n", "\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
        let got = until_closed(&mut s, b"")?;
        (!got.starts_with(b"HTTP/1.1 503")).then_some(())
    });
}

#[test]
fn slow_idle_and_surplus_connections_are_cut_off_on_the_api_admin_and_metrics_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("api-token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let admin_file = dir.path().join("admin-token");
    std::fs::write(&admin_file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(
        &admin_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let (api, admin, metrics) = (free_addr(), free_addr(), free_addr());
    let text = config_text(
        dir.path(),
        &format!(
            "[admin]\nlisten = \"{admin}\"\ntoken_file = {:?}\n[http]\napi_listen = [\"{api}\"]\n\
             api_token_file = {:?}\nheader_read_timeout = \"1s\"\nbody_read_timeout = \"1s\"\n\
             api_max_connections = 3\n[metrics]\nlisten = \"{metrics}\"\n",
            admin_file.display().to_string(),
            file.display().to_string()
        ),
    );
    let mut d = Daemon::start(dir.path(), &text, &[], api);
    d.wait_listening(admin);
    d.wait_listening(metrics);
    let bearer = format!("authorization: Bearer {TOKEN}\r\n");
    let checks = [
        (
            api,
            format!("GET /v1/auth HTTP/1.1\r\nhost: a\r\nx-original-uri: /x\r\n{bearer}\r\n"),
            Some(format!(
                "POST /v1/decide HTTP/1.1\r\nhost: a\r\ncontent-type: application/json\r\n{bearer}\r\n"
            )),
        ),
        (
            admin,
            format!("GET /admin/v1/lockouts HTTP/1.1\r\nhost: a\r\n{bearer}\r\n"),
            Some(format!(
                "POST /admin/v1/lockouts HTTP/1.1\r\nhost: a\r\ncontent-type: application/json\r\n{bearer}\r\n"
            )),
        ),
        (
            metrics,
            "GET /healthz HTTP/1.1\r\nhost: a\r\n\r\n".to_string(),
            None,
        ),
    ];
    std::thread::scope(|scope| {
        for (addr, get, post) in &checks {
            scope.spawn(move || slow_clients_are_cut_off(*addr, get, post.as_deref()));
        }
    });
}

/// `limiter-daemon run` with `text` as its config and `env_token` as `LIMITER_ADMIN_TOKEN`,
/// expected to refuse to start: its stderr.
fn refused_start(dir: &std::path::Path, text: &str, env_token: Option<&str>) -> String {
    let config = dir.join("limiter.toml");
    std::fs::write(&config, text).unwrap();
    let stderr = dir.join("refused.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_limiter-daemon"));
    cmd.args(["run", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap());
    match env_token {
        Some(t) => cmd.env("LIMITER_ADMIN_TOKEN", t),
        None => cmd.env_remove("LIMITER_ADMIN_TOKEN"),
    };
    let mut child = cmd.spawn().unwrap();
    // A daemon that accepts the token runs on: stop it and fail rather than wait for ever.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if std::time::Instant::now() > deadline {
            limiter_tests::process::terminate(&mut child, std::time::Duration::from_secs(5));
            break None;
        }
        std::thread::park_timeout(std::time::Duration::from_millis(25));
    };
    let err = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert!(
        status.is_some_and(|s| !s.success()),
        "the daemon started: {err}"
    );
    err
}

/// Issue 21, P8: an admin token under 16 characters (from the environment or a file), or a
/// token file other users may read, stops the daemon at start with the source named; the
/// daemon used to run with `LIMITER_ADMIN_TOKEN=abc` and a 0644 token file.
#[test]
fn a_weak_admin_token_stops_the_daemon_at_start_naming_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let admin = free_addr();
    let base = config_text(
        dir.path(),
        &format!("[admin]\nlisten = \"{admin}\"\n[http]\n[metrics]\nlisten = \"\"\n"),
    );
    let err = refused_start(dir.path(), &base, Some("hunter2"));
    assert!(
        err.contains("LIMITER_ADMIN_TOKEN") && err.contains("at least 16"),
        "{err}"
    );
    let file = dir.path().join("admin-token-file");
    let with_file = config_text(
        dir.path(),
        &format!(
            "[admin]\nlisten = \"{admin}\"\ntoken_file = {:?}\n[http]\n[metrics]\nlisten = \"\"\n",
            file.display().to_string()
        ),
    );
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(&file, "short\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = refused_start(dir.path(), &with_file, None);
    assert!(
        err.contains(&file.display().to_string()) && err.contains("at least 16"),
        "{err}"
    );
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = refused_start(dir.path(), &with_file, None);
    assert!(
        err.contains(&file.display().to_string()) && err.contains("chmod 600"),
        "{err}"
    );
}
