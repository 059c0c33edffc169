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

use limiter_tests::free_port;
use limiter_tests::nginx::{auth_example, available, proxy_example, Nginx};
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
    let mut req = format!("GET {path} HTTP/1.1\r\nhost: app.test\r\nconnection: close\r\n");
    for (k, v) in extra {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    exchange(addr, req.as_bytes())
}

/// Sends `request` over a fresh connection and reads the answer to the end.
fn exchange(addr: SocketAddr, request: &[u8]) -> Response {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse(&String::from_utf8_lossy(&raw))
}

/// A response as text (status line, fields, body), as sent or as `curl -i` prints it.
fn parse(text: &str) -> Response {
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text, ""));
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
/// An nginx server block on `listen` whose locations name themselves: what nginx serves a
/// path as, whatever the spelling (`route=reader` for `/healthz/../reader`).
fn echo_locations(listen: SocketAddr) -> String {
    format!(
        "server {{\n  listen {listen};\n  default_type text/plain;\n\
         location /reader {{ return 200 \"route=reader\"; }}\n\
         location /healthz {{ return 200 \"route=healthz\"; }}\n\
         location / {{ return 200 \"route=default\"; }}\n}}\n"
    )
}

/// The example's routes: `/reader` costs 10, `/healthz` is never metered, the rest costs 1.
const PATH_ROUTES: &str = "[tiers.anon]\nburst = 10000\nhourly = 5000\n[quota]\nanon = 100000\n\
     [[routes]]\nprefix = \"/reader\"\ncost = 10\n\
     [[routes]]\nprefix = \"/healthz\"\nlimits = []\n";

/// Spellings of a path (issue 35, D4). Each is either refused (400) or metered as the route
/// nginx serves it as.
const SPELLINGS: &[&str] = &[
    "/reader",
    "/healthz/../reader",
    "/healthz/%2e%2e/reader",
    "/healthz/%2E%2E/reader",
    "/healthz/.%2e/reader",
    "/x/../reader",
    "/./reader",
    "//reader",
    "/healthz//reader",
    "/healthz/..%2freader",
    "/healthz%2f..%2freader",
    "/healthz%2F%2E%2E%2Freader",
    "/healthz;/../reader",
    "/reader/..",
    "/reader/%2e%2e",
    "/reader%2F..",
    "/%72eader",
    "/read%65r?x=1",
    "/healthz/%252e%252e/reader",
    "/healthz/..%3freader",
    "/healthz/..?/reader",
    "/healthz/...",
    "/healthz",
    "/other",
];

/// The hourly units left, from the `RateLimit` field (`"hourly";r=N;t=..`); `None` when the
/// response carries no rate-limit fields (an unmetered route).
fn hourly_left(r: &Response) -> Option<u64> {
    let field = r
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("ratelimit"))?;
    let item = field.1.split(", ").find(|i| i.starts_with("\"hourly\""))?;
    let r = item.split(';').find_map(|p| p.strip_prefix("r="))?;
    Some(r.parse().unwrap())
}

/// What the request cost, given the hourly units left before it.
fn check_metered(what: &str, r: &Response, left: &mut u64) -> Option<&'static str> {
    if r.status == 400 {
        assert_eq!(
            r.header("content-type"),
            "application/problem+json",
            "{what}"
        );
        assert!(r.body.contains("dot segment"), "{what}: {}", r.body);
        assert!(!r.body.starts_with("route="), "{what}: reached nginx");
        return None;
    }
    assert_eq!(r.status, 200, "{what}: {}", r.body);
    let route = r
        .body
        .strip_prefix("route=")
        .unwrap_or_else(|| panic!("{what}: {}", r.body));
    let (route, cost) = match route {
        "reader" => ("reader", 10),
        "healthz" => ("healthz", 0),
        "default" => ("default", 1),
        other => panic!("{what}: nginx served {other}"),
    };
    match hourly_left(r) {
        None => assert_eq!(
            cost, 0,
            "{what}: nginx served {route}, yet it was not metered"
        ),
        Some(now) => {
            assert_eq!(
                *left - now,
                cost,
                "{what}: nginx served {route}, which costs {cost}, but it cost {}",
                *left - now
            );
            *left = now;
        }
    }
    Some(route)
}

/// The daemon binary's proxy in front of a real nginx: every spelling of a path is refused
/// (400) or metered as the route nginx serves it as, on the own HTTP/1.1 loop and under
/// hyper (HTTP/1.0 is handed over, and HTTP/2); `/v1/auth` behind the shipped nginx config and
/// `/v1/decide` read it the same way.
#[test]
fn every_spelling_of_a_path_is_metered_as_the_route_nginx_serves() {
    if !require(available(), "nginx (/usr/sbin/nginx)") {
        return;
    }
    let (app, front) = (lo(free_port()), lo(free_port()));
    let (api, proxy) = (lo(free_port()), lo(free_port()));
    let _daemon = start_daemon_with(api, proxy, app, PATH_ROUTES, "");
    let conf = format!("{}{}", echo_locations(app), auth_example(front, app, api));
    let nginx = Nginx::start(&conf, front, 1);
    // Served straight by nginx: what each spelling is, to the upstream.
    let mut direct = Vec::new();
    for p in SPELLINGS {
        let r = get(app, p, &[]);
        direct.push((r.status == 200).then(|| r.body.clone()));
    }
    let mut left = 5000;
    // What each surface made of each spelling (`None`: refused), to show the table bites.
    let mut seen = Vec::new();
    for (i, p) in SPELLINGS.iter().enumerate() {
        for version in ["1.1", "1.0", "2"] {
            let r = get_version(proxy, p, version);
            let what = format!("proxy HTTP/{version} {p}");
            let route = check_metered(&what, &r, &mut left);
            if let Some(route) = route {
                assert_eq!(
                    direct[i].as_deref(),
                    Some(&*format!("route={route}")),
                    "{what}"
                );
            }
            seen.push((format!("proxy/{version}"), *p, route));
        }
    }
    // Forward auth: nginx reads the path, the daemon reads X-Original-URI ($request_uri).
    for p in SPELLINGS {
        let r = get(front, p, &[]);
        let what = format!("auth_request {p}");
        seen.push(("auth".into(), *p, check_metered(&what, &r, &mut left)));
    }
    for surface in ["proxy/1.1", "proxy/1.0", "proxy/2", "auth"] {
        let of = |p: &str| {
            seen.iter()
                .find(|(s, q, _)| s == surface && *q == p)
                .map(|(_, _, r)| *r)
                .unwrap()
        };
        for refused in ["/healthz/../reader", "/healthz%2f..%2freader", "/reader/.."] {
            assert_eq!(
                of(refused),
                None,
                "{surface} {refused}: {}",
                nginx.error_log()
            );
        }
        for reader in ["/reader", "//reader", "/%72eader", "/read%65r?x=1"] {
            assert_eq!(of(reader), Some("reader"), "{surface} {reader}");
        }
        assert_eq!(
            of("/healthz/%252e%252e/reader"),
            Some("healthz"),
            "{surface}"
        );
    }
    // The decision API: the same reading of its body's path.
    let r = post_decide(api, "/healthz/%2e%2e/reader");
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("\"field\":\"path\""), "{}", r.body);
    let r = post_decide(api, "//%72eader");
    assert_eq!(r.status, 200, "{}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    let rl = v["headers"]["ratelimit"].as_str().unwrap();
    assert!(
        rl.contains(&format!("\"hourly\";r={}", left - 10)),
        "{rl} after {left}"
    );
}

/// [`get`] in HTTP/`version` (`1.0` goes to hyper's server on the proxy, `2` is h2c with
/// prior knowledge, sent by curl as is).
fn get_version(addr: SocketAddr, path: &str, version: &str) -> Response {
    if version == "1.1" {
        return get(addr, path, &[]);
    }
    if version == "2" {
        let out = Command::new("curl")
            .args(["-s", "-i", "--http2-prior-knowledge", "--path-as-is"])
            .arg(format!("http://{addr}{path}"))
            .output()
            .expect("run curl");
        return parse(&String::from_utf8_lossy(&out.stdout));
    }
    exchange(
        addr,
        format!("GET {path} HTTP/{version}\r\nhost: app.test\r\n\r\n").as_bytes(),
    )
}

fn post_decide(api: SocketAddr, path: &str) -> Response {
    let body = serde_json::json!({"ip": "127.0.0.1", "method": "GET", "path": path}).to_string();
    exchange(
        api,
        format!(
            "POST /v1/decide HTTP/1.1\r\nhost: api\r\nconnection: close\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
}
