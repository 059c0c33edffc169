//! End to end with the real daemon binary (`limiter-daemon run`, embedded store, kernel off):
//! Debian's nginx in front of a real upstream, using the shipped
//! `examples/nginx/limiter-auth.conf` to ask the daemon's `/v1/auth`: allowed requests reach the
//! upstream, rejected ones get the daemon's 429 and never reach it. The same binary's reverse
//! proxy is checked against the same upstream.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use limiter_tests::nginx::{auth_example, available, free_port, proxy_example, Nginx};
use limiter_tests::{daemon_binary, poll, require};

/// A minimal HTTP/1.1 upstream on a thread: answers every request `200 upstream:<path>` and
/// counts them.
struct Upstream {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

fn start_upstream() -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = Arc::clone(&hits);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let h = Arc::clone(&h);
            std::thread::spawn(move || {
                // Serve keep-alive requests until the peer closes.
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match s.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                buf.extend_from_slice(&chunk[..n]);
                                continue;
                            }
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 4);
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                    h.fetch_add(1, Ordering::SeqCst);
                    let body = format!("upstream:{path}");
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nx-upstream: yes\r\n\r\n{body}",
                        body.len()
                    );
                    if s.write_all(resp.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    Upstream { addr, hits }
}

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("header {name} missing in {:?}", self.headers))
    }
}

/// One request over a fresh connection (`Connection: close`), read to the end.
fn get(addr: SocketAddr, path: &str, extra: &[(&str, &str)]) -> Response {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nhost: app.test\r\nconnection: close\r\n");
    for (k, v) in extra {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    // Bodies here are small; a chunked one is unwrapped by taking its JSON or text core.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body.lines()
            .filter(|l| !l.is_empty() && u64::from_str_radix(l.trim(), 16).is_err())
            .collect::<Vec<_>>()
            .join("")
    } else {
        body.to_string()
    };
    Response {
        status,
        headers,
        body,
    }
}

struct Daemon {
    child: Child,
    dir: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        limiter_tests::process::terminate(&mut self.child, Duration::from_secs(10));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs the daemon binary with an embedded store, no kernel, anonymous burst 2/min.
fn start_daemon(api: SocketAddr, proxy: SocketAddr, upstream: SocketAddr) -> Daemon {
    start_daemon_with(
        api,
        proxy,
        upstream,
        "[tiers.anon]\nburst = 2\nhourly = 100\n\n",
        "",
    )
}

/// [`start_daemon`] with `head` (tiers, quota, routes) in place of the burst of 2, and the
/// metrics listener on `metrics` (`""`: none).
fn start_daemon_with(
    api: SocketAddr,
    proxy: SocketAddr,
    upstream: SocketAddr,
    head: &str,
    metrics: &str,
) -> Daemon {
    let dir = std::env::temp_dir().join(format!(
        "limiter-nginx-e2e-{}-{}",
        std::process::id(),
        api.port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config = format!(
        "{head}[kernel]\nmode = \"off\"\n\n\
         [store]\nstate_dir = \"{}\"\n\n[metrics]\nlisten = \"{metrics}\"\n\n\
         [admin]\nlisten = \"\"\n\n[http]\napi_listen = [\"{api}\"]\nproxy_listen = [\"{proxy}\"]\nupstream = \"http://{upstream}\"\n",
        dir.join("state").display()
    );
    let path = dir.join("limiter.toml");
    std::fs::write(&path, config).unwrap();
    let child = Command::new(daemon_binary())
        .arg("run")
        .arg("--config")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start limiter-daemon");
    let mut d = Daemon { child, dir };
    poll(Duration::from_secs(20), "the daemon's listeners", || {
        if let Ok(Some(status)) = d.child.try_wait() {
            panic!("limiter-daemon exited early: {status}");
        }
        (TcpStream::connect(api).is_ok() && TcpStream::connect(proxy).is_ok()).then_some(())
    });
    d
}

fn lo(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

#[test]
fn nginx_auth_request_in_front_of_the_daemon_binary() {
    if !require(available(), "nginx (/usr/sbin/nginx)") {
        return;
    }
    let up = start_upstream();
    let (api, proxy) = (lo(free_port()), lo(free_port()));
    let _daemon = start_daemon(api, proxy, up.addr);
    let listen = lo(free_port());
    let nginx = Nginx::start(&auth_example(listen, up.addr, api), listen, 1);

    for left in ["1", "0"] {
        let r = get(listen, "/reports/today?x=1", &[]);
        assert_eq!(r.status, 200, "{}\n{}", r.body, nginx.error_log());
        assert_eq!(r.body, "upstream:/reports/today?x=1");
        assert_eq!(r.header("x-upstream"), "yes");
        assert_eq!(r.header("x-ratelimit-tier"), "anon");
        assert_eq!(r.header("x-ratelimit-remaining"), left);
    }
    assert_eq!(up.hits.load(Ordering::SeqCst), 2);

    let r = get(listen, "/reports/today", &[]);
    assert_eq!(r.status, 429, "{}\n{}", r.body, nginx.error_log());
    assert_eq!(r.header("content-type"), "application/problem+json");
    assert_eq!(r.header("x-ratelimit-tier"), "anon");
    assert_eq!(r.header("x-ratelimit-remaining"), "0");
    assert_eq!(r.header("x-ratelimit-limit"), "2");
    assert_eq!(r.header("x-ratelimit-limit-hour"), "100");
    assert!(r
        .header("ratelimit-policy")
        .starts_with("\"burst\";q=2;w=60"));
    let retry: u64 = r.header("retry-after").parse().unwrap();
    assert!((1..=65).contains(&retry), "Retry-After {retry}");
    let v: serde_json::Value =
        serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("{e}: {:?}", r.body));
    assert_eq!(v["status"], 429);
    assert_eq!(v["reason"], "burst");
    assert_eq!(v["tier"], "anon");
    assert_eq!(v["retryAfter"], retry);
    assert!(v["upgrade"].as_str().unwrap().contains("/login"));
    assert_eq!(
        up.hits.load(Ordering::SeqCst),
        2,
        "a rejected request must not reach the upstream"
    );

    // The burst earned a strike and a lockout of the IP: even with a session cookie the same
    // client is now refused as `locked`, with the lockout's remainder as Retry-After.
    let r = get(listen, "/reports/today", &[("cookie", "session=1")]);
    assert_eq!(r.status, 429, "{}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["reason"], "locked");
    assert!(r.header("retry-after").parse::<u64>().unwrap() >= 1);
    assert_eq!(up.hits.load(Ordering::SeqCst), 2);
}

#[test]
fn daemon_binary_reverse_proxy_forwards_and_rejects() {
    let up = start_upstream();
    let (api, proxy) = (lo(free_port()), lo(free_port()));
    let _daemon = start_daemon(api, proxy, up.addr);
    for _ in 0..2 {
        let r = get(proxy, "/a/b?c=d", &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, "upstream:/a/b?c=d");
        assert_eq!(r.header("x-ratelimit-tier"), "anon");
    }
    let r = get(proxy, "/a/b", &[]);
    assert_eq!(r.status, 429);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["reason"], "burst");
    assert_eq!(up.hits.load(Ordering::SeqCst), 2);
}

/// A scan-delayed request whose client gives up while the daemon holds its `/v1/auth` answer
/// never reaches the app: nginx drops the subrequest with its client, and the daemon's hold
/// ends with the connection instead of answering an allow that nothing would wait for.
#[test]
fn a_client_that_gives_up_while_its_auth_answer_is_held_never_reaches_the_app() {
    if !require(available(), "nginx (/usr/sbin/nginx)") {
        return;
    }
    let up = start_upstream();
    let (api, proxy) = (lo(free_port()), lo(free_port()));
    // One request a day, then 20 s holds: the client below gives up long before.
    let head = "[quota]\nanon = 1\nsoft_delay_ms = 20000\nsoft_window = 30\n\n\
                [[routes]]\nprefix = \"/scan\"\nover_quota = \"delay\"\n\n\
                [default_route]\nlimits = [\"burst\"]\n\n";
    let metrics = lo(free_port());
    let _daemon = start_daemon_with(api, proxy, up.addr, head, &metrics.to_string());
    let listen = lo(free_port());
    let nginx = Nginx::start(&auth_example(listen, up.addr, api), listen, 1);

    let r = get(listen, "/scan/a", &[]);
    assert_eq!(r.status, 200, "{}\n{}", r.body, nginx.error_log());
    assert_eq!(up.hits.load(Ordering::SeqCst), 1);

    let started = std::time::Instant::now();
    let mut s = TcpStream::connect(listen).unwrap();
    s.write_all(b"GET /scan/b HTTP/1.1\r\nhost: app.test\r\n\r\n")
        .unwrap();
    poll(
        Duration::from_secs(5),
        "the over-quota request to be held",
        || (held(metrics) == 1).then_some(()),
    );
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 256];
    assert!(s.read(&mut buf).is_err(), "held, not answered");
    // The client gives up.
    drop(s);
    // The daemon's hold ends with nginx's subrequest (its connection closes), well before the
    // 20 s delay: then nothing can be allowed on the abandoned request's behalf.
    poll(Duration::from_secs(10), "the abandoned hold to end", || {
        (held(metrics) == 0).then_some(())
    });
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the hold ended with its client, not at the end of the delay"
    );
    // A request after it is served; the abandoned one never was.
    let r = get(listen, "/other", &[]);
    assert_eq!(r.status, 200, "{}\n{}", r.body, nginx.error_log());
    assert_eq!(
        up.hits.load(Ordering::SeqCst),
        2,
        "the abandoned request must not reach the app"
    );
}

/// Requests the daemon holds for a scan delay right now (`limiter_held_requests`).
fn held(metrics: SocketAddr) -> u64 {
    let r = get(metrics, "/metrics", &[]);
    r.body
        .lines()
        .find_map(|l| l.strip_prefix("limiter_held_requests "))
        .unwrap_or_else(|| panic!("no limiter_held_requests in {}", r.body))
        .trim()
        .parse()
        .unwrap()
}

/// The shipped `examples/nginx/limiter-proxy.conf`: nginx in front of the daemon's own proxy.
/// Callers named by nginx's X-Forwarded-For are metered apart, the daemon's 429 reaches the
/// client as the daemon wrote it, and a refused request never reaches the app.
#[test]
fn nginx_in_front_of_the_daemon_proxy_as_shipped() {
    if !require(available(), "nginx (/usr/sbin/nginx)") {
        return;
    }
    let up = start_upstream();
    let (api, proxy) = (lo(free_port()), lo(free_port()));
    // nginx's address in `[identity] trusted_proxies`, as the example asks.
    let head = "[tiers.anon]\nburst = 2\nhourly = 100\n\n\
                [identity]\ntrusted_proxies = [\"127.0.0.1\"]\n\n";
    let _daemon = start_daemon_with(api, proxy, up.addr, head, "");
    let listen = lo(free_port());
    let nginx = Nginx::start(&proxy_example(listen, proxy), listen, 1);
    let from = |ip: &'static str| [("x-forwarded-for", ip)];
    for left in ["1", "0"] {
        let r = get(listen, "/page", &from("203.0.113.7"));
        assert_eq!(r.status, 200, "{}\n{}", r.body, nginx.error_log());
        assert_eq!(r.body, "upstream:/page");
        assert_eq!(r.header("x-ratelimit-remaining"), left);
    }
    let r = get(listen, "/page", &from("203.0.113.7"));
    assert_eq!(r.status, 429, "{}\n{}", r.body, nginx.error_log());
    assert_eq!(r.header("content-type"), "application/problem+json");
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["reason"], "burst");
    assert_eq!(up.hits.load(Ordering::SeqCst), 2);
    // Another client behind the same nginx has its own budget.
    let r = get(listen, "/page", &from("203.0.113.8"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-ratelimit-remaining"), "1");
    assert_eq!(up.hits.load(Ordering::SeqCst), 3);
}

/// The shipped `examples/nginx/limiter-auth.conf` with the daemon down: as shipped it fails
/// open (the app serves the request unmetered); with its one documented line uncommented it
/// fails closed (503, and the app sees nothing).
#[test]
fn with_the_daemon_down_the_auth_example_fails_open_or_closed_as_chosen() {
    if !require(available(), "nginx (/usr/sbin/nginx)") {
        return;
    }
    let up = start_upstream();
    // Nothing listens on the daemon's address: it is stopped.
    let daemon = lo(free_port());
    let listen = lo(free_port());
    let open = Nginx::start(&auth_example(listen, up.addr, daemon), listen, 1);
    let r = get(listen, "/reports/today", &[]);
    assert_eq!(r.status, 200, "{}\n{}", r.body, open.error_log());
    assert_eq!(r.body, "upstream:/reports/today");
    assert_eq!(up.hits.load(Ordering::SeqCst), 1);
    drop(open);

    let closing = "# return 503 '{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,\"detail\":\"The rate limiter";
    let example = auth_example(listen, up.addr, daemon);
    assert!(
        example.contains(closing),
        "the fail-closed line is in the example"
    );
    let closed = Nginx::start(&example.replace(closing, &closing[2..]), listen, 1);
    let r = get(listen, "/reports/today", &[]);
    assert_eq!(r.status, 503, "{}\n{}", r.body, closed.error_log());
    let v: serde_json::Value =
        serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.body));
    assert_eq!(v["status"], 503);
    assert_eq!(
        up.hits.load(Ordering::SeqCst),
        1,
        "failing closed, nothing reaches the app"
    );
}
