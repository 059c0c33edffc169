//! The decision API token against the real daemon binary: with `[http] api_token_file` set,
//! `/v1/decide` and `/v1/auth` answer 401 (`WWW-Authenticate: Bearer`, problem+json) without
//! the token or with a wrong one, and decide with it; `check-config` warns on stderr (exit 0)
//! when the API listens off loopback without a token. Slow and idle clients on the API, admin
//! and metrics listeners are cut off by `[http]`'s read timeouts and connection cap, before
//! any token is checked. The connection bounds of every listener against the binary started
//! under a low descriptor limit (issue 35): one client's idle connections cannot take the
//! descriptors the others need, a partial PROXY header costs no CPU while it waits, and a v2
//! header may carry kilobytes of TLVs.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use limiter_tests::client::decide;
use limiter_tests::client::request;
use limiter_tests::daemon::config_text;
use limiter_tests::daemon::Daemon;
use limiter_tests::eventually;
use limiter_tests::free_addr;
use limiter_tests::upstream::Upstream;

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
    let _d = Daemon::run(dir.path(), &text, &[], api);
    for (auth, status) in [
        (None, 401),
        (Some("wrong-token-0123456789abcdef"), 401),
        (Some(&TOKEN[..TOKEN.len() - 1]), 401),
        (Some(TOKEN), 200),
    ] {
        let a = decide(api, "203.0.113.5", "/x", auth);
        assert_eq!(a.status, status, "{auth:?}: {a:?}");
        if status == 401 {
            assert_eq!(a.field("www-authenticate"), "Bearer");
            assert_eq!(a.field("content-type"), "application/problem+json");
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
    let mut d = Daemon::run(dir.path(), &text, &[], api);
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

/// Raises this test process's own soft descriptor limit to its hard one: it opens thousands
/// of connections.
fn raise_own_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the one struct given, which outlives them.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max.min(1 << 20);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
}

/// A TCP connection to `to` from the loopback address `from`.
fn connect_from(from: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    let from: SocketAddr = format!("{from}:0").parse().unwrap();
    sock.bind(&from.into())?;
    sock.connect(&to.into())?;
    Ok(sock.into())
}

/// `n` idle HTTP/2 connections from `from` (each source address in turn): the client preface
/// and an empty SETTINGS frame, then nothing. Write errors (a connection the daemon closed
/// at once) are ignored: the connection is kept either way, as a client would keep it.
fn idle_h2(from: &[String], to: SocketAddr, n: usize) -> Vec<TcpStream> {
    const HELLO: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
    (0..n)
        .map(|i| {
            let mut s = connect_from(&from[i % from.len()], to).unwrap();
            let _ = s.write_all(HELLO);
            s
        })
        .collect()
}

/// `GET path` from `from` on its own connection: the status, or `None` when no answer came
/// within `within` (or the connection was closed without one).
fn get_from(from: &str, to: SocketAddr, path: &str, within: Duration) -> Option<u16> {
    let mut s = connect_from(from, to).ok()?;
    s.set_read_timeout(Some(within)).unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nhost: app.test\r\nconnection: close\r\n\r\n");
    s.write_all(head.as_bytes()).ok()?;
    let mut got = [0u8; 12];
    let mut n = 0;
    while n < got.len() {
        match s.read(&mut got[n..]) {
            Ok(0) | Err(_) => return None,
            Ok(k) => n += k,
        }
    }
    std::str::from_utf8(&got[9..12]).ok()?.parse().ok()
}

/// Descriptors the process `pid` holds now.
fn open_fds(pid: libc::pid_t) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// The soft and hard `Max open files` of the process `pid`.
fn nofile_of(pid: libc::pid_t) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let mut words = line["Max open files".len()..].split_whitespace();
    let soft = words.next().unwrap().parse().unwrap();
    let hard = words.next().unwrap().parse().unwrap();
    (soft, hard)
}

/// Issue 35, D1: one client could use up the daemon's descriptors and stop every listener.
/// Started as systemd starts a unit with no `LimitNOFILE` (here a soft limit of 512 under a
/// hard 1,024), 1,100 idle HTTP/2 connections from one address took every descriptor: a
/// normal request got no answer, `/healthz` timed out and `accept failed` was logged ~100
/// times a second. Now the soft limit is raised to the hard one, the address gets its share
/// of the proxy's cap and no more, other callers and `/healthz` are answered at once; the
/// same number spread over 40 addresses fills the proxy's cap, past which a new connection
/// is closed at once while `/healthz` still answers, and never a descriptor short.
#[test]
fn one_client_cannot_use_up_the_descriptors() {
    raise_own_nofile();
    let dir = tempfile::tempdir().unwrap();
    let up = Upstream::start();
    let (proxy, metrics) = (free_addr(), free_addr());
    let text = config_text(
        dir.path(),
        &format!(
            "[admin]\nlisten = \"\"\n[http]\nproxy_listen = [\"{proxy}\"]\nupstream = \"http://{}\"\n\
             header_read_timeout = \"30s\"\nworker_threads = 2\n[metrics]\nlisten = \"{metrics}\"\n",
            up.addr
        ),
    );
    let mut d = Daemon::run_with_nofile(dir.path(), &text, (512, 1024), proxy);
    d.wait_listening(metrics);
    let pid = d.pid();
    let quick = Duration::from_secs(2);

    let one = idle_h2(&["127.0.0.1".to_string()], proxy, 1100);
    assert_eq!(
        get_from("127.0.0.2", proxy, "/page", quick),
        Some(200),
        "a normal request while one address holds 1,100 connections:\n{}",
        d.logs()
    );
    assert_eq!(
        get_from("127.0.0.2", metrics, "/healthz", quick),
        Some(200),
        "/healthz:\n{}",
        d.logs()
    );
    // The address kept its share (an eighth of the proxy's half of 1,024 − 128), no more.
    let held = open_fds(pid);
    assert!(held < 200, "{held} descriptors open");

    let many: Vec<String> = (1..=40).map(|i| format!("127.0.1.{i}")).collect();
    let spread = idle_h2(&many, proxy, 1100);
    assert_eq!(
        get_from("127.0.0.3", metrics, "/healthz", quick),
        Some(200),
        "/healthz with the proxy's cap full:\n{}",
        d.logs()
    );
    let started = Instant::now();
    assert_eq!(get_from("127.0.0.3", proxy, "/page", quick), None);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a connection past the cap waited {:?} to be closed",
        started.elapsed()
    );
    let held = open_fds(pid);
    assert!(
        (448..1024 - 64).contains(&held),
        "{held} descriptors open with the proxy's cap full"
    );
    drop(spread);
    eventually(
        "the proxy answering again once the spread connections closed",
        || (get_from("127.0.0.3", proxy, "/page", quick) == Some(200)).then_some(()),
    );
    drop(one);

    assert_eq!(
        nofile_of(pid),
        (1024, 1024),
        "the soft limit raised to the hard"
    );
    let log = d.logs();
    assert!(
        log.contains("raised to the hard limit") && log.contains("connection caps"),
        "{log}"
    );
    assert!(log.contains("proxy connection cap reached"), "{log}");
    let failed = log.matches("accept failed").count();
    assert!(failed <= 1, "accept failed logged {failed} times:\n{log}");
}

/// Reads the CPU time (user + system, in clock ticks of 10 ms) the process `pid` has used.
fn cpu_ticks(pid: libc::pid_t) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name's closing parenthesis; utime and stime are the 14th
    // and 15th of the whole line.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Issue 35, D7 and D10, against the binary with `proxy_protocol = "optional"` and loopback
/// as the trusted balancer. D7: 1,000 connections holding a partial PROXY header cost 39 % of
/// a core (the header was peeked again every millisecond); now they cost nothing while they
/// wait. D10: a v2 header carrying 2 KiB of TLVs (what cloud balancers send) was refused
/// past 552 bytes; now it names the client.
#[test]
fn partial_proxy_headers_cost_no_cpu_and_v2_headers_may_carry_tlvs() {
    raise_own_nofile();
    let dir = tempfile::tempdir().unwrap();
    let up = Upstream::start();
    let proxy = free_addr();
    let text = config_text(
        dir.path(),
        &format!(
            "[admin]\nlisten = \"\"\n[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\
             [http]\nproxy_listen = [\"{proxy}\"]\nupstream = \"http://{}\"\n\
             proxy_protocol = \"optional\"\nheader_read_timeout = \"30s\"\n\
             [metrics]\nlisten = \"\"\n",
            up.addr
        ),
    );
    let d = Daemon::run(dir.path(), &text, &[], proxy);
    let pid = d.pid();
    let before = open_fds(pid);
    let partial: Vec<TcpStream> = (0..1000)
        .map(|_| {
            let mut s = TcpStream::connect(proxy).unwrap();
            s.write_all(b"PROXY ").unwrap();
            s
        })
        .collect();
    limiter_tests::poll(
        Duration::from_secs(10),
        "the daemon holding the 1,000 connections",
        // (`before` counted a few descriptors of start-up that have closed since.)
        || (open_fds(pid) >= before + 1000 - 8).then_some(()),
    );
    let (t0, c0) = (Instant::now(), cpu_ticks(pid));
    // The window the cost is measured over (not a wait for anything).
    std::thread::sleep(Duration::from_secs(1));
    let (spent, wall) = (cpu_ticks(pid) - c0, t0.elapsed());
    assert!(
        spent * 10 <= 100,
        "{} ms of CPU in {wall:?} while 1,000 connections hold a partial PROXY header",
        spent * 10
    );
    drop(partial);

    // v2, PROXY, TCP over IPv4 from 198.51.100.44:6000, then 2 KiB of NOOP TLVs.
    let mut body = vec![198, 51, 100, 44, 127, 0, 0, 1, 0x17, 0x70, 0, 80];
    while body.len() < 12 + 2048 {
        body.extend_from_slice(&[0x04, 0, 252]);
        body.extend_from_slice(&[0; 252]);
    }
    let mut wire = b"\r\n\r\n\0\r\nQUIT\n\x21\x11".to_vec();
    wire.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
    wire.extend_from_slice(&body);
    wire.extend_from_slice(b"GET /tlv HTTP/1.1\r\nhost: app.test\r\nconnection: close\r\n\r\n");
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&wire).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}\n{}",
        String::from_utf8_lossy(&got),
        d.logs()
    );
    assert!(up.targets().contains(&"/tlv".to_string()));
}
