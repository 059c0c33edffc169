//! The forward-auth rows of `cargo xtask bench proxy` (included with `#[path]` by `proxy`):
//! what asking this daemon costs each front end, against the same front end asking an endpoint
//! that does nothing, in one run. For each of nginx, Caddy and HAProxy, three variants,
//! alternated A, B, C in every round (`BENCH_ROUNDS`, `BENCH_SECS`, `wrk --latency -t2 -c64`
//! from one address):
//!
//! - **A**: the front end alone, proxying to the upstream;
//! - **B**: the shipped example asking a trivial endpoint instead of the daemon: an nginx
//!   (1 worker) answering `return 200` for nginx `auth_request` and Caddy `forward_auth`; for
//!   HAProxy, which the example puts in front of the daemon's proxy, an nginx (1 worker)
//!   proxying to the upstream with keep-alive;
//! - **C**: the shipped example (`examples/nginx/limiter-auth.conf`, `examples/caddy/Caddyfile`,
//!   `examples/haproxy/haproxy.cfg`) asking the daemon, with its API token set.
//!
//! Printed per front end: requests/s of each variant (medians), C/B and C/A (medians of each
//! round's ratios), the non-2xx answers of each variant over every round, and the CPU per call
//! of the daemon in C and of the trivial endpoint in B (user + system ticks of its processes
//! over the round, from `/proc/<pid>/task/*/stat`, divided by the requests served).
//!
//! `LIMITER_BENCH_ROWS` picks them: `nginx-auth`, `caddy`, `haproxy`.

use std::net::SocketAddr;
use std::path::Path;

use limiter_tests::caddy::{self, Caddy};
use limiter_tests::free_port;
use limiter_tests::haproxy::{self, Haproxy};
use limiter_tests::nginx::{auth_example_with_token, Nginx};

use super::front::wanted;
use super::wrk::{median, start_daemon, wrk_with, Daemon, Run};
use super::{children, clock_ticks_per_sec, cpu_ticks};

const TOKEN: &str = "bench-api-token-0123456789abcdef";

fn addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

struct Variant {
    url: String,
    /// The running front end, stopped when dropped.
    _front: Box<dyn std::any::Any>,
}

/// The daemon: its API for nginx and Caddy, its proxy to `up` for HAProxy; limits out of
/// reach and the network level off (every request comes from wrk's one address).
fn daemon(
    bin: &Path,
    scratch: &Path,
    api: SocketAddr,
    proxy: SocketAddr,
    up: SocketAddr,
) -> Daemon {
    let big = 400_000_000u32;
    let token = scratch.join("api-token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let config = format!(
        "[tiers.anon]\nhourly = {big}\n\n[quota]\nanon = {big}\n\n\
         [default_route]\nlimits = [\"hourly\", \"daily\"]\n\n\
         [networks.prefix]\nenabled = false\n\n\
         [store]\nstate_dir = \"{}\"\n\n[kernel]\nmode = \"off\"\n\n\
         [metrics]\nlisten = \"\"\n\n[admin]\nlisten = \"\"\n\n\
         [http]\napi_listen = [\"{api}\"]\nproxy_listen = [\"{proxy}\"]\n\
         upstream = \"http://{up}\"\napi_token_file = \"{}\"\nworker_threads = 2\n",
        scratch.join("state-auth").display(),
        token.display()
    );
    let path = scratch.join("limiter-auth.toml");
    std::fs::write(&path, config).unwrap();
    start_daemon(bin, &path, &[api, proxy])
}

/// A, B and C of one front end, with `trivial` the endpoint (or proxy) B asks.
fn variants(
    row: &str,
    up: SocketAddr,
    trivial: SocketAddr,
    api: SocketAddr,
    proxy: SocketAddr,
) -> Vec<Variant> {
    let v = |front: Box<dyn std::any::Any>, listen: SocketAddr| Variant {
        url: format!("http://{listen}/index.html"),
        _front: front,
    };
    let (a, b, c) = (addr(), addr(), addr());
    match row {
        "nginx-auth" => {
            let plain = format!(
                "upstream app {{ server {up}; keepalive 32; }}\n\
                 server {{ listen {a}; location / {{ proxy_pass http://app; \
                 proxy_http_version 1.1; proxy_set_header Connection \"\"; }} }}"
            );
            vec![
                v(Box::new(Nginx::start(&plain, a, 2)), a),
                v(
                    Box::new(Nginx::start(
                        &auth_example_with_token(b, up, trivial, TOKEN),
                        b,
                        2,
                    )),
                    b,
                ),
                v(
                    Box::new(Nginx::start(
                        &auth_example_with_token(c, up, api, TOKEN),
                        c,
                        2,
                    )),
                    c,
                ),
            ]
        }
        "caddy" => {
            let conf = |listen, auth| {
                caddy::with_token(&caddy::forward_auth_example(listen, up, auth), TOKEN)
            };
            vec![
                v(Box::new(Caddy::start(&caddy::plain_proxy(a, up), a)), a),
                v(Box::new(Caddy::start(&conf(b, trivial), b)), b),
                v(Box::new(Caddy::start(&conf(c, api), c)), c),
            ]
        }
        _ => {
            let conf = |listen, behind| haproxy::example(listen, addr(), behind, up);
            vec![
                v(Box::new(Haproxy::start(&conf(a, up), a)), a),
                v(Box::new(Haproxy::start(&conf(b, trivial), b)), b),
                v(Box::new(Haproxy::start(&conf(c, proxy), c)), c),
            ]
        }
    }
}

/// CPU per request in µs of `pids` while `run` served its requests.
fn per_call(ticks: u64, run: &Run) -> f64 {
    ticks as f64 / clock_ticks_per_sec() * 1e6 / run.requests.max(1) as f64
}

/// Runs the forward-auth rows `LIMITER_BENCH_ROWS` asks for and prints their table.
pub fn run(bin: &Path, up: SocketAddr, secs: u64, rounds: usize, scratch: &Path) {
    let rows: Vec<&str> = ["nginx-auth", "caddy", "haproxy"]
        .into_iter()
        .filter(|r| wanted(r))
        .collect();
    if rows.is_empty() {
        return;
    }
    let (api, proxy) = (addr(), addr());
    let daemon = daemon(bin, scratch, api, proxy, up);
    let daemon_pid = [daemon.0.id()];
    let (trivial, trivial_proxy) = (addr(), addr());
    let endpoint = Nginx::start(
        &format!(
            "server {{ listen {trivial}; keepalive_requests 1000000; location / {{ return 200; }} }}\n\
             upstream app {{ server {up}; keepalive 32; }}\n\
             server {{ listen {trivial_proxy}; keepalive_requests 1000000; location / {{ \
             proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection \"\"; }} }}"
        ),
        trivial,
        1,
    );
    let mut endpoint_pids = children(endpoint.pid());
    endpoint_pids.push(endpoint.pid());
    let mut table = Vec::new();
    for row in rows {
        let behind = if row == "haproxy" {
            trivial_proxy
        } else {
            trivial
        };
        let vs = variants(row, up, behind, api, proxy);
        for v in &vs {
            let _warm = wrk_with(&v.url, 2, None);
        }
        let mut runs: Vec<Vec<Run>> = vec![Vec::new(); 3];
        let (mut daemon_us, mut endpoint_us) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            for (i, v) in vs.iter().enumerate() {
                let (d0, e0) = (cpu_ticks(&daemon_pid), cpu_ticks(&endpoint_pids));
                let r = wrk_with(&v.url, secs, None);
                match i {
                    1 => endpoint_us.push(per_call(cpu_ticks(&endpoint_pids) - e0, &r)),
                    2 => daemon_us.push(per_call(cpu_ticks(&daemon_pid) - d0, &r)),
                    _ => {}
                }
                runs[i].push(r);
            }
        }
        let ratio = |x: usize, y: usize| {
            median(
                runs[x]
                    .iter()
                    .zip(&runs[y])
                    .map(|(p, q)| p.rps / q.rps)
                    .collect(),
            )
        };
        let rps = |i: usize| median(runs[i].iter().map(|r| r.rps).collect());
        let non_2xx = |i: usize| runs[i].iter().map(|r| r.non_2xx + r.errors).sum::<u64>();
        table.push(format!(
            "| {row} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {} / {} / {} | {:.1} | {:.1} |",
            rps(0),
            rps(1),
            rps(2),
            ratio(2, 1),
            ratio(2, 0),
            non_2xx(0),
            non_2xx(1),
            non_2xx(2),
            median(daemon_us),
            median(endpoint_us),
        ));
    }
    drop((daemon, endpoint));
    println!();
    println!(
        "forward-auth rows: A the front end alone, B asking a trivial endpoint, C asking the \
         daemon; {rounds} rounds of {secs}s alternating A, B, C; 2 cores shared by everything"
    );
    println!();
    println!(
        "| front end | A req/s | B req/s | C req/s | C/B | C/A | non-2xx A / B / C | daemon CPU µs/call (C) | trivial endpoint CPU µs/call (B) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for line in table {
        println!("{line}");
    }
}
