//! WebSocket through the proxy against the real daemon binary, with a real WebSocket server
//! and client (tungstenite) on loopback. Callers are told apart by their source address
//! (127.0.0.N). On the own loop's path (`own_loop = true`, which hands upgrades to hyper):
//! messages echo both ways with the rate-limit fields on the `101`; the upgrade is counted
//! once, like any request, and a caller over its burst gets `429` at the upgrade;
//! `max_tunnels_per_identity` and `max_tunnels` answer `503` with `Retry-After`; an `h2c`
//! upgrade is answered over HTTP/1.1 and never reaches the upstream as an upgrade; an idle
//! tunnel is closed; an operator lockout closes its caller's open tunnel; the metrics count it
//! all; and at shutdown a tunnel lives through the grace period, then is closed. On hyper's
//! path (`max_header_count = 128`, more fields than the loop parses) messages echo both ways too.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use limiter_tests::client::metrics;
use limiter_tests::client::request;
use limiter_tests::daemon::config_text;
use limiter_tests::daemon::Daemon;
use limiter_tests::eventually;
use limiter_tests::free_addr;
use tungstenite::{Message, WebSocket};

/// The upstream: a WebSocket echo server that greets each client first; any other request is
/// answered `200` with a body naming the `Upgrade` field it arrived with.
fn upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || serve(conn));
        }
    });
    addr
}

fn serve(mut conn: TcpStream) {
    let mut peek = [0u8; 4096];
    let head = loop {
        let Ok(n) = conn.peek(&mut peek) else { return };
        let text = String::from_utf8_lossy(&peek[..n]).to_ascii_lowercase();
        if text.contains("\r\n\r\n") || n == peek.len() {
            break text;
        }
        if n == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    if head.contains("upgrade: websocket") {
        let Ok(mut ws) = tungstenite::accept(conn) else {
            return;
        };
        if ws.send(Message::text("welcome")).is_err() {
            return;
        }
        while let Ok(m) = ws.read() {
            if (m.is_text() || m.is_binary()) && ws.send(m).is_err() {
                return;
            }
        }
        return;
    }
    let end = head.find("\r\n\r\n").unwrap() + 4;
    let mut skip = vec![0u8; end];
    let _ = conn.read_exact(&mut skip);
    let upgrade = head
        .lines()
        .find_map(|l| l.strip_prefix("upgrade: "))
        .unwrap_or("none")
        .to_string();
    let body = format!("upgrade={upgrade}");
    let _ = write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// A TCP connection to `to` from 127.0.0.`n`.
fn from(n: u8, to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::from(([127, 0, 0, n], 0)).into())
        .unwrap();
    s.connect(&to.into()).unwrap();
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    s
}

type Ws = WebSocket<TcpStream>;

/// A WebSocket from 127.0.0.`n` through `proxy`: the socket and the `101`'s fields, or the
/// refusal's status and fields.
fn ws(n: u8, proxy: SocketAddr) -> Result<(Ws, http::HeaderMap), (u16, http::HeaderMap)> {
    let stream = from(n, proxy);
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    match tungstenite::client::client(format!("ws://{proxy}/ws"), stream) {
        Ok((ws, resp)) => {
            ws.get_ref()
                .set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            Ok((ws, resp.headers().clone()))
        }
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp))) => {
            Err((resp.status().as_u16(), resp.headers().clone()))
        }
        Err(e) => panic!("upgrade through the proxy: {e}"),
    }
}

/// The refusal of an upgrade from 127.0.0.`n`: its status and fields.
fn refused(n: u8, proxy: SocketAddr) -> (u16, http::HeaderMap) {
    match ws(n, proxy) {
        Ok(_) => panic!("the upgrade from 127.0.0.{n} was let through"),
        Err(refusal) => refusal,
    }
}

/// The next data message, waiting up to 5 s.
fn next(ws: &mut Ws) -> Message {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match ws.read() {
            Ok(m) if m.is_text() || m.is_binary() => return m,
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                assert!(Instant::now() < deadline, "no message within 5 s");
            }
            Err(e) => panic!("tunnel broke: {e}"),
        }
    }
}

/// Echoes a text and a binary message after the upstream's greeting.
fn echo(ws: &mut Ws) {
    assert_eq!(next(ws), Message::text("welcome"));
    ws.send(Message::text("hello")).unwrap();
    assert_eq!(next(ws), Message::text("hello"));
    let blob: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
    ws.send(Message::binary(blob.clone())).unwrap();
    assert_eq!(next(ws), Message::binary(blob));
}

/// Time until the tunnel is closed under the client (any error but a read timeout), waiting at
/// most `within`.
fn closed_within(ws: &mut Ws, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        match ws.read() {
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return start.elapsed(),
        }
        assert!(
            start.elapsed() < within,
            "tunnel still open after {within:?}"
        );
    }
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

fn start(dir: &std::path::Path, up: SocketAddr, own_loop: bool) -> (Daemon, [SocketAddr; 3]) {
    // More fields than the own loop parses: every request takes hyper's server.
    let hyper_only = if own_loop {
        ""
    } else {
        "max_header_count = 128\n"
    };
    let (proxy, admin, metrics) = (free_addr(), free_addr(), free_addr());
    let text = config_text(
        dir,
        &format!(
            "[tiers.anon]\nburst = 5\n[admin]\nlisten = \"{admin}\"\n[http]\n\
             proxy_listen = [\"{proxy}\"]\nupstream = \"http://{up}\"\n{hyper_only}\
             max_tunnels = 4\nmax_tunnels_per_identity = 2\ntunnel_idle_timeout = \"3s\"\n\
             shutdown_grace = \"2s\"\n[metrics]\nlisten = \"{metrics}\"\n"
        ),
    );
    let mut d = Daemon::run(dir, &text, &[], proxy);
    d.wait_listening(admin);
    d.wait_listening(metrics);
    (d, [proxy, admin, metrics])
}

#[test]
fn websocket_through_the_own_loop_path() {
    let dir = tempfile::tempdir().unwrap();
    let up = upstream();
    let (mut d, [proxy, admin, metrics_at]) = start(dir.path(), up, true);

    // Echo both ways; the 101 carries the caller's rate-limit fields.
    let (mut a, fields) = ws(2, proxy).unwrap();
    assert!(fields.contains_key("ratelimit"), "{fields:?}");
    assert!(fields.contains_key("ratelimit-policy"), "{fields:?}");
    echo(&mut a);

    // Per identity: two tunnels, the third refused 503 with Retry-After.
    let (mut b1, _) = ws(3, proxy).unwrap();
    let (_b2, _) = ws(3, proxy).unwrap();
    let (status, fields) = refused(3, proxy);
    assert_eq!(status, 503);
    assert_eq!(fields["retry-after"], "30");
    // In all: four open (one from .2, two from .3, one from .4); a fifth is refused.
    let (_c, _) = ws(4, proxy).unwrap();
    let (status, _) = refused(5, proxy);
    assert_eq!(status, 503);
    echo(&mut b1);
    drop((b1, _b2, _c));

    // The h2c upgrade is answered over HTTP/1.1; the upstream never saw `Upgrade`.
    let mut s = from(9, proxy);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET /plain HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n\
         Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("upgrade=") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("upgrade=none"), "{text}");
    drop(s);

    // Counted once at the upgrade: burst 5 = this upgrade + 4 requests; the next upgrade 429.
    let (t, _) = ws(6, proxy).unwrap();
    drop(t);
    for _ in 0..4 {
        let mut s = from(6, proxy);
        write!(s, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    }
    let (status, fields) = refused(6, proxy);
    assert_eq!(status, 429);
    assert!(fields.contains_key("ratelimit"), "{fields:?}");
    assert!(fields.contains_key("retry-after"), "{fields:?}");

    // Idle: no byte either way for 3 s closes the tunnel.
    let (mut idle, _) = ws(7, proxy).unwrap();
    assert_eq!(next(&mut idle), Message::text("welcome"));
    let after = closed_within(&mut idle, Duration::from_secs(8));
    assert!(after >= Duration::from_secs(2), "closed after {after:?}");

    // (.2's tunnel, silent as long, was closed too.)
    assert!(closed_within(&mut a, Duration::from_secs(1)) < Duration::from_secs(1));

    // An operator lockout closes the caller's open tunnel (checked once a second).
    let (mut a, _) = ws(10, proxy).unwrap();
    echo(&mut a);
    let (mut locked, _) = ws(8, proxy).unwrap();
    echo(&mut locked);
    let token = std::fs::read_to_string(dir.path().join("state").join("admin-token")).unwrap();
    let r = request(
        admin,
        "POST",
        "/admin/v1/lockouts",
        &[
            ("authorization", &format!("Bearer {}", token.trim())),
            ("content-type", "application/json"),
        ],
        r#"{"ip":"127.0.0.8","for":"1m","reason":"test"}"#,
    );
    assert!(r.status < 300, "{r:?}");
    closed_within(&mut locked, Duration::from_secs(5));
    // The others are untouched.
    a.send(Message::text("still")).unwrap();
    assert_eq!(next(&mut a), Message::text("still"));

    let m = eventually("the lockout close counted", || {
        let m = metrics(metrics_at);
        m.contains("tunnels_closed_total{reason=\"lockout\"} 1")
            .then_some(m)
    });
    // .2 .3 .3 .4 .6 .7 .10 .8 opened; .3's third and .5 refused.
    assert_eq!(metric(&m, "limiter_tunnels_opened_total"), 8, "{m}");
    assert_eq!(metric(&m, "limiter_tunnels_refused_total"), 2, "{m}");
    assert_eq!(metric(&m, "limiter_tunnels_open"), 1, "{m}");
    assert!(m.contains("tunnels_closed_total{reason=\"idle\"} 2"), "{m}");
    assert!(m.contains("tunnels_closed_total{reason=\"peer\"} 4"), "{m}");

    // Shutdown: the open tunnel still works within the 2 s grace, then is closed.
    let asked = Instant::now();
    d.signal(libc::SIGTERM);
    // Shutdown has begun once the daemon logs the signal; the grace runs from there.
    d.wait_log("SIGTERM", 1);
    a.send(Message::text("grace")).unwrap();
    assert_eq!(next(&mut a), Message::text("grace"));
    closed_within(&mut a, Duration::from_secs(6));
    let at = asked.elapsed();
    assert!(
        at >= Duration::from_millis(1800),
        "closed {at:?} after SIGTERM"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while d.running() {
        assert!(
            Instant::now() < deadline,
            "daemon still running:\n{}",
            d.logs()
        );
        std::thread::park_timeout(Duration::from_millis(20));
    }
}

#[test]
fn websocket_through_the_hyper_path() {
    let dir = tempfile::tempdir().unwrap();
    let up = upstream();
    let (_d, [proxy, _, _]) = start(dir.path(), up, false);
    let (mut a, fields) = ws(2, proxy).unwrap();
    assert!(fields.contains_key("ratelimit"), "{fields:?}");
    echo(&mut a);
    let (mut b, _) = ws(3, proxy).unwrap();
    echo(&mut b);
    a.send(Message::text("again")).unwrap();
    assert_eq!(next(&mut a), Message::text("again"));
}
