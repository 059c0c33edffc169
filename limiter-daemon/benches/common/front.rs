//! The gRPC row of `cargo xtask bench proxy` (included with `#[path]` by `proxy`; the
//! forward-auth rows are in `forward_auth.rs`), against a baseline measured in the same run:
//!
//! - **Envoy `ShouldRateLimit`**: calls per second from a tonic client, 64 calls in flight on
//!   one HTTP/2 connection (as Envoy multiplexes its rate-limit calls), each naming the next
//!   of 65,536 client addresses as `remote_address`, against `POST /v1/decide` with the same
//!   addresses from `wrk -t2 -c64`: the same decision through the two wire formats.
//!
//! `LIMITER_BENCH_ROWS` picks rows: a comma list of `proxy` (the proxy table), `nginx-auth`,
//! `caddy`, `haproxy` (the forward-auth rows), `grpc`; unset runs all.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use limiter_tests::free_port;

use super::wrk::{median, start_daemon, wrk_with, Daemon, Run};

/// Whether `LIMITER_BENCH_ROWS` asks for `row` (unset: every row).
pub fn wanted(row: &str) -> bool {
    match std::env::var("LIMITER_BENCH_ROWS") {
        Err(_) => true,
        Ok(list) => list.split(',').any(|r| r.trim() == row),
    }
}

fn addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// The daemon with only its API (and gRPC) listeners, limits out of reach.
fn daemon(bin: &Path, scratch: &Path, api: SocketAddr, grpc: SocketAddr) -> Daemon {
    let big = 400_000_000u32;
    let state = scratch.join("state-front");
    let config = format!(
        "[tiers.anon]\nhourly = {big}\n\n[quota]\nanon = {big}\n\n\
         [default_route]\nlimits = [\"hourly\", \"daily\"]\n\n\
         [networks.prefix]\nenabled = false\n\n\
         [store]\nstate_dir = \"{}\"\n\n[kernel]\nmode = \"off\"\n\n\
         [metrics]\nlisten = \"\"\n\n[admin]\nlisten = \"\"\n\n\
         [http]\napi_listen = [\"{api}\"]\ngrpc_listen = [\"{grpc}\"]\nworker_threads = 2\n",
        state.display()
    );
    let path = scratch.join("limiter-front.toml");
    std::fs::write(&path, config).unwrap();
    start_daemon(bin, &path, &[api, grpc])
}

/// A wrk script POSTing `/v1/decide` bodies naming the next of 65,536 client addresses.
fn decide_script(dir: &Path) -> std::path::PathBuf {
    let script = dir.join("decide.lua");
    std::fs::write(
        &script,
        "local n = 0\nwrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n\
         request = function()\n  n = n + 1\n  local ip = \"10.\" .. (n % 256) .. \".\" .. \
         (math.floor(n / 256) % 256) .. \".7\"\n  return wrk.format(nil, \"/v1/decide\", nil, \
         '{\"ip\":\"' .. ip .. '\",\"method\":\"GET\",\"path\":\"/index.html\"}')\nend\n",
    )
    .expect("write the wrk script");
    script
}

/// Calls per second and latency (p50, p99 ms) of `ShouldRateLimit`, 64 in flight for `secs`.
fn should_rate_limit_load(grpc: SocketAddr, secs: u64) -> (f64, f64, f64) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let client = RateLimitServiceClient::connect(format!("http://{grpc}"))
            .await
            .expect("connect to grpc_listen");
        let stop = Arc::new(AtomicBool::new(false));
        let next = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..64 {
            let (mut c, stop, next) = (client.clone(), Arc::clone(&stop), Arc::clone(&next));
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let ip = format!("10.{}.{}.7", n % 256, (n / 256) % 256);
                    let req = RateLimitRequest {
                        domain: "bench".into(),
                        descriptors: vec![RateLimitDescriptor {
                            entries: vec![
                                Entry {
                                    key: "remote_address".into(),
                                    value: ip,
                                },
                                Entry {
                                    key: "path".into(),
                                    value: "/index.html".into(),
                                },
                            ],
                            ..Default::default()
                        }],
                        hits_addend: 0,
                    };
                    let t = Instant::now();
                    let r = c.should_rate_limit(req).await.expect("ShouldRateLimit");
                    assert_eq!(
                        r.into_inner().overall_code,
                        Code::Ok as i32,
                        "limits too low?"
                    );
                    lat.push(t.elapsed().as_secs_f64() * 1e3);
                }
                lat
            }));
        }
        tokio::time::sleep(Duration::from_secs(secs)).await;
        stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        let rate = all.len() as f64 / started.elapsed().as_secs_f64();
        all.sort_by(|a, b| a.total_cmp(b));
        let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
        (rate, at(0.50), at(0.99))
    })
}

/// Runs the `ShouldRateLimit` row when `LIMITER_BENCH_ROWS` asks for it and prints its table.
pub fn run(bin: &Path, secs: u64, rounds: usize, scratch: &Path) {
    if !wanted("grpc") {
        return;
    }
    let (api, grpc) = (addr(), addr());
    let daemon = daemon(bin, scratch, api, grpc);
    let mut table: Vec<(String, Run, Option<f64>)> = Vec::new();
    {
        let script = decide_script(scratch);
        let url = format!("http://{api}/v1/decide");
        let _warm = wrk_with(&url, 2, Some(&script));
        let _warm = should_rate_limit_load(grpc, 2);
        let mut decide = Vec::new();
        let mut rls = Vec::new();
        for _ in 0..rounds {
            let r = wrk_with(&url, secs, Some(&script));
            assert_eq!(
                r.non_2xx, 0,
                "/v1/decide: {} answers were not 2xx",
                r.non_2xx
            );
            decide.push(r);
            rls.push(should_rate_limit_load(grpc, secs));
        }
        table.push((
            "POST /v1/decide (wrk -c64)".into(),
            median_run(&decide),
            None,
        ));
        let rate = median(rls.iter().map(|r| r.0).collect());
        let p50 = median(rls.iter().map(|r| r.1).collect());
        let p99 = median(rls.iter().map(|r| r.2).collect());
        let run = Run {
            rps: rate,
            p50_ms: p50,
            p99_ms: p99,
            non_2xx: 0,
            errors: 0,
            requests: 0,
        };
        table.push((
            "ShouldRateLimit (tonic, 64 in flight, one HTTP/2 connection)".into(),
            run,
            Some(rate),
        ));
    }
    drop(daemon);
    println!();
    println!(
        "front-end rows: median of {rounds} rounds of {secs}s; 2 cores shared by the load, \
         the front end, the daemon and the upstream"
    );
    println!();
    println!("| path | requests/s | p50 ms | p99 ms |");
    println!("|---|---:|---:|---:|");
    for (name, r, _) in &table {
        println!(
            "| {name} | {:.0} | {:.2} | {:.2} |",
            r.rps, r.p50_ms, r.p99_ms
        );
    }
    println!();
    let find = |prefix: &str| table.iter().find(|(n, _, _)| n.starts_with(prefix));
    if let (Some(decide), Some(rls)) = (find("POST /v1/decide"), find("ShouldRateLimit")) {
        println!(
            "ShouldRateLimit / POST /v1/decide throughput: {:.2}",
            rls.1.rps / decide.1.rps
        );
    }
}

fn median_run(s: &[Run]) -> Run {
    Run {
        rps: median(s.iter().map(|r| r.rps).collect()),
        p50_ms: median(s.iter().map(|r| r.p50_ms).collect()),
        p99_ms: median(s.iter().map(|r| r.p99_ms).collect()),
        non_2xx: s.iter().map(|r| r.non_2xx).sum(),
        errors: s.iter().map(|r| r.errors).sum(),
        requests: s.iter().map(|r| r.requests).sum(),
    }
}
