//! `cargo xtask bench proxy`: throughput and latency through the daemon's reverse proxy,
//! against the same upstream reached directly and through nginx with `limit_req`, in one run.
//!
//! - Upstream: nginx (1 worker) serving a small static file.
//! - nginx + `limit_req`: 2 workers, keep-alive to the upstream, a rate so high nothing is
//!   rejected.
//! - Daemon: the `bench-fast` binary (`limiter-daemon run`) with a generated config: embedded
//!   store, kernel off, 2 runtime worker threads, limits high enough that nothing is rejected;
//!   twice: once as it runs (SCHED_BATCH proxy threads), once with its proxy threads put back
//!   on the normal policy from outside (the policy is no setting).
//! - A second nginx whose workers are put on SCHED_BATCH, so both policies compare like for like.
//! - Clients: every request names one of 65,536 client addresses in `X-Forwarded-For` (a wrk
//!   script; each address in its own /24), as many clients behind one trusted proxy would. The
//!   daemon trusts 127.0.0.1 and meters each address and its /24 (network budgets on, at their
//!   defaults); the nginx proxies key `limit_req` on the same address (`real_ip_header`).
//!   (From wrk's one address the daemon metered every request as one /24 and refused most.)
//! - Load: `wrk --latency -t2 -c64 -d<secs>s` (BENCH_SECS, default 10) after a 2 s warm-up,
//!   in BENCH_ROUNDS (default 3) rounds interleaving the three paths; medians are reported.
//! - CPU per request: user + system time of that path's own processes (nginx master and
//!   workers, or the daemon) divided by the requests served: a figure that holds up better than
//!   requests/s when other work shares the machine.
//!
//! - `BENCH_ACCESS_LOG=1`: the daemons write their access log (`[log] access`, JSON) and the
//!   nginx proxies theirs (`access_log`, combined), each to a file in the scratch directory, so
//!   the cost of the log is measured like for like.
//!
//! Prints a table with ratios: daemon/nginx throughput and the p99 each adds over the direct
//! path. Any non-2xx answer fails the run (a rejected request would flatter the numbers).

use std::net::SocketAddr;
use std::process::{Command, Stdio};

use limiter_tests::free_port;
use limiter_tests::nginx::{available, Nginx};

#[path = "common/edge.rs"]
mod edge;
#[path = "common/forward_auth.rs"]
mod forward_auth;
#[path = "common/front.rs"]
mod front;
#[path = "common/wrk.rs"]
mod wrk;
use wrk::{
    daemon_binary, median, spread_script, wait_listening, wrk_available, wrk_with, Daemon, Run,
};

fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(child) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // Fields after the `(comm)`: state, ppid, …
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        if rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok())
            == Some(pid)
        {
            out.push(child);
        }
    }
    out
}

fn cpu_ticks(pids: &[u32]) -> u64 {
    let mut total = 0;
    for pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
                continue;
            };
            let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
            let f: Vec<&str> = rest.split_whitespace().collect();
            // utime and stime are fields 14 and 15 of stat: 12 and 13 after `(comm)`.
            total += f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            total += f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    total
}

fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    if !limiter_tests::require(available() && wrk_available(), "nginx and wrk") {
        return;
    }
    let bin = daemon_binary();
    assert!(
        bin.exists(),
        "{} is missing: run `cargo xtask bench proxy` (it builds the daemon with --profile bench-fast)",
        bin.display()
    );
    let secs: u64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let scratch = tempfile::tempdir().expect("temp dir");

    // Upstream: nginx serving a small static file.
    let www = scratch.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(
        www.join("index.html"),
        "<!doctype html><title>upstream</title><p>hello from the upstream</p>\n",
    )
    .unwrap();
    let up_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let upstream = Nginx::start(
        &format!(
            "server {{ listen {up_addr} backlog=4096; keepalive_requests 1000000; location / {{ root {}; }} }}",
            www.display()
        ),
        up_addr,
        1,
    );

    // The forward-auth and ShouldRateLimit rows (`LIMITER_BENCH_ROWS`), their own tables.
    let rounds_env = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok());
    forward_auth::run(
        &bin,
        up_addr,
        secs,
        rounds_env.unwrap_or(3).max(1),
        scratch.path(),
    );
    front::run(&bin, secs, rounds_env.unwrap_or(3).max(1), scratch.path());
    if !front::wanted("proxy") {
        return;
    }

    // nginx with limit_req in front of the same upstream; a second, identical one whose workers
    // run SCHED_BATCH, as the daemon's proxy threads do by default (like for like).
    let access_log = std::env::var("BENCH_ACCESS_LOG").is_ok_and(|v| v == "1");
    let logs = scratch.path().to_path_buf();
    let nginx_conf = |addr: SocketAddr| {
        let log = if access_log {
            format!("access_log {}/nginx-{}.log;", logs.display(), addr.port())
        } else {
            String::new()
        };
        format!(
            "limit_req_zone $binary_remote_addr zone=bench:10m rate=1000000r/s;\n\
             upstream app {{ server {up_addr}; keepalive 128; }}\n\
             server {{ listen {addr} backlog=4096; keepalive_requests 1000000; {log}\n\
               set_real_ip_from 127.0.0.1; real_ip_header X-Forwarded-For;\n\
               location / {{ limit_req zone=bench burst=1000000 nodelay;\n\
                 proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection \"\";\n\
                 proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for; }} }}"
        )
    };
    let ng_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let nginx = Nginx::start(&nginx_conf(ng_addr), ng_addr, 2);
    let ngb_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let nginx_batch = Nginx::start(&nginx_conf(ngb_addr), ngb_addr, 2);
    for worker in children(nginx_batch.pid()) {
        set_batch_policy(worker);
    }

    // The daemon's proxy, embedded store, limits out of reach: once as it runs (SCHED_BATCH
    // proxy threads), once with its proxy threads put on the normal policy from outside. The burst window is
    // capped at 65535 per minute, far below this load, so the bench route counts hourly and
    // daily units only (both checked and counted per request in the store, like any other
    // request). The metrics listener is off so a bench never collides on its fixed default port.
    // wrk's address is the trusted proxy: the client is the address its script names.
    let start_daemon = |name: &str, extra: &str| {
        let px_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let api_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let state = scratch.path().join(format!("state-{name}"));
        let big = 400_000_000u32;
        let log = if access_log {
            format!(
                "[log]\naccess = \"{}\"\n\n",
                scratch.path().join(format!("access-{name}.log")).display()
            )
        } else {
            String::new()
        };
        let config = format!(
            "{log}[tiers.anon]\nhourly = {big}\n\n[quota]\nanon = {big}\n\n\
             [default_route]\nlimits = [\"hourly\", \"daily\"]\n\n\
             [identity]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\n\
             [store]\nstate_dir = \"{}\"\n\n[kernel]\nmode = \"off\"\n\n\
             [metrics]\nlisten = \"\"\n\n[admin]\nlisten = \"\"\n\n\
             [http]\nproxy_listen = [\"{px_addr}\"]\napi_listen = [\"{api_addr}\"]\n\
             upstream = \"http://{up_addr}\"\nworker_threads = 2\n{extra}",
            state.display()
        );
        let config_path = scratch.path().join(format!("limiter-{name}.toml"));
        std::fs::write(&config_path, config).unwrap();
        let mut child = Command::new(&bin)
            .arg("run")
            .arg("--config")
            .arg(&config_path)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("start the daemon");
        wait_listening(px_addr, &mut child);
        (Daemon(child), px_addr)
    };
    let (daemon, px_addr) = start_daemon("default", "");
    let (daemon_normal, pxn_addr) = start_daemon("normal", "");
    set_normal_policy_of_proxy_threads(daemon_normal.0.id());

    let daemon_pid = vec![daemon.0.id()];
    let nginx_pids = |master: u32| {
        let mut p = children(master);
        p.push(master);
        p
    };
    let targets: [(&str, String, Vec<u32>); 5] = [
        (
            "direct (upstream)",
            format!("http://{up_addr}/index.html"),
            nginx_pids(upstream.pid()),
        ),
        (
            "nginx limit_req",
            format!("http://{ng_addr}/index.html"),
            nginx_pids(nginx.pid()),
        ),
        (
            "limiter-daemon proxy",
            format!("http://{px_addr}/index.html"),
            daemon_pid,
        ),
        (
            "nginx limit_req, SCHED_BATCH workers",
            format!("http://{ngb_addr}/index.html"),
            nginx_pids(nginx_batch.pid()),
        ),
        (
            "limiter-daemon proxy, normal policy",
            format!("http://{pxn_addr}/index.html"),
            vec![daemon_normal.0.id()],
        ),
    ];
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1);
    let script = spread_script(scratch.path());
    let wrk = |url: &str, secs: u64| wrk_with(url, secs, Some(&script));
    for (_, url, _) in &targets {
        let _warm = wrk(url, 2);
    }
    // Rounds interleave the three paths, so load from elsewhere on the machine drifts over all
    // of them alike; each figure is the median over the rounds.
    let tick = clock_ticks_per_sec();
    let mut samples: Vec<Vec<(Run, f64)>> = vec![Vec::new(); targets.len()];
    for _ in 0..rounds {
        for (i, (name, url, pids)) in targets.iter().enumerate() {
            let before = cpu_ticks(pids);
            let r = wrk(url, secs);
            let used = (cpu_ticks(pids) - before) as f64 / tick;
            assert_eq!(
                r.non_2xx, 0,
                "{name}: {} answers were not 2xx (limits too low?)",
                r.non_2xx
            );
            let us_per_req = if r.requests > 0 {
                used * 1e6 / r.requests as f64
            } else {
                f64::NAN
            };
            samples[i].push((r, us_per_req));
        }
    }
    drop((daemon, daemon_normal, nginx, nginx_batch));

    struct Row {
        rps: f64,
        p50: f64,
        p99: f64,
        cpu_us: f64,
        errors: u64,
    }
    let rows: Vec<Row> = samples
        .iter()
        .map(|s| Row {
            rps: median(s.iter().map(|(r, _)| r.rps).collect()),
            p50: median(s.iter().map(|(r, _)| r.p50_ms).collect()),
            p99: median(s.iter().map(|(r, _)| r.p99_ms).collect()),
            cpu_us: median(s.iter().map(|(_, c)| *c).collect()),
            errors: s.iter().map(|(r, _)| r.errors).sum(),
        })
        .collect();
    let (direct, ng, dm, ngb, dmn) = (&rows[0], &rows[1], &rows[2], &rows[3], &rows[4]);
    println!();
    println!(
        "proxy benchmark: wrk --latency -t2 -c64 -d{secs}s, median of {rounds} interleaved rounds; \
         2 cores shared by wrk, proxies and upstream; access logs {}",
        if access_log {
            "on (daemons: [log] access, JSON; nginx: access_log, combined)"
        } else {
            "off"
        }
    );
    println!();
    println!("| path | requests/s | p50 ms | p99 ms | p99 added over direct (ms) | CPU per request (µs, that path's own processes) | socket errors |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for ((name, _, _), r) in targets.iter().zip(&rows) {
        println!(
            "| {name} | {:.0} | {:.2} | {:.2} | {:.2} | {:.1} | {} |",
            r.rps,
            r.p50,
            r.p99,
            r.p99 - direct.p99,
            r.cpu_us,
            r.errors
        );
    }
    let added_dm = dm.p99 - direct.p99;
    let added_ng = ng.p99 - direct.p99;
    println!();
    println!("daemon / nginx throughput: {:.2}", dm.rps / ng.rps);
    println!("daemon / direct throughput: {:.2}", dm.rps / direct.rps);
    println!(
        "daemon / nginx CPU per request: {:.2}",
        dm.cpu_us / ng.cpu_us
    );
    println!(
        "p99 added: daemon {added_dm:.2} ms vs nginx {added_ng:.2} ms (daemon - nginx = {:+.2} ms)",
        added_dm - added_ng
    );
    println!(
        "like for like: both SCHED_BATCH {:.2}, both the normal policy {:.2} (daemon / nginx throughput)",
        dm.rps / ngb.rps,
        dmn.rps / ng.rps
    );
    // TLS, HTTP/2, WebSocket and rapid reset, against the same upstream.
    edge::run(&bin, scratch.path(), up_addr, &script, secs, rounds);
    drop(upstream);
}

/// Puts process `pid` (an nginx worker) on `SCHED_BATCH`, as the daemon does its proxy threads.
fn set_batch_policy(pid: u32) {
    set_policy(pid, libc::SCHED_BATCH);
}

/// Puts the proxy threads of the daemon `pid` back on the normal policy.
fn set_normal_policy_of_proxy_threads(pid: u32) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the daemon's threads");
    let mut n = 0;
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if let (true, Some(tid)) = (
            comm.starts_with("limiter-proxy"),
            t.file_name().to_str().and_then(|s| s.parse().ok()),
        ) {
            set_policy(tid, libc::SCHED_OTHER);
            n += 1;
        }
    }
    assert!(n > 0, "no proxy thread in daemon {pid}");
}

fn set_policy(pid: u32, policy: libc::c_int) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain syscall on a pid we started; `param` is valid for the call.
    let rc = unsafe { libc::sched_setscheduler(pid as i32, policy, &param) };
    assert_eq!(
        rc,
        0,
        "sched_setscheduler({pid}): {}",
        std::io::Error::last_os_error()
    );
}
