//! Shared by the Valkey tests: a three-primary Valkey Cluster on loopback, the commands
//! clients send while a closure runs (MONITOR, leaving out a script's own), and the calls a
//! server counted per command (`INFO commandstats`).
#![allow(dead_code)]

use std::process::Command;
use std::time::Duration;

use limiter_tests::valkey::Server;

/// The commands other clients send the servers at `addrs` while `f` runs, as MONITOR reports
/// them: one line per command a client sent (a round trip), and a script's own commands marked
/// `lua`, which are left out here.
pub fn client_commands_during(addrs: &[&str], f: impl FnOnce()) -> Vec<String> {
    let mut watched = Vec::new();
    for addr in addrs {
        let client = redis::Client::open(format!("redis://{addr}/")).unwrap();
        let mut monitor = client.get_connection().unwrap();
        let other = client.get_connection().unwrap();
        monitor
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        redis::cmd("MONITOR").exec(&mut monitor).unwrap();
        watched.push((monitor, other));
    }
    f();
    let mut lines = Vec::new();
    for (monitor, other) in &mut watched {
        // MONITOR streams in order: once this marker arrives, everything `f` sent has.
        let marker = format!("end-of-run-{}", rand::random::<u64>());
        redis::cmd("ECHO").arg(&marker).exec(other).unwrap();
        loop {
            let line: String = redis::from_redis_value(monitor.recv_response().unwrap()).unwrap();
            if line.contains(&marker) {
                break;
            }
            if !line.contains(" lua]") {
                lines.push(line);
            }
        }
    }
    lines
}

/// A three-primary Valkey Cluster on loopback (one implementation: [`limiter_tests::valkey::cluster`]).
pub fn start_cluster() -> Option<Vec<Server>> {
    limiter_tests::valkey::cluster()
}

/// `INFO commandstats` calls per command (`evalsha`, `get`, …) summed over `addrs`.
pub fn commandstats(addrs: &[&str]) -> std::collections::HashMap<String, u64> {
    let mut out = std::collections::HashMap::new();
    for addr in addrs {
        let client = redis::Client::open(format!("redis://{addr}/")).unwrap();
        let mut c = client.get_connection().unwrap();
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut c)
            .unwrap();
        for line in info.lines() {
            let Some(rest) = line.strip_prefix("cmdstat_") else {
                continue;
            };
            let Some((name, stats)) = rest.split_once(':') else {
                continue;
            };
            let calls = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            *out.entry(name.to_string()).or_insert(0) += calls;
        }
    }
    out
}

/// Resets `INFO commandstats` on `addrs`.
pub fn reset_stats(addrs: &[&str]) {
    for addr in addrs {
        let client = redis::Client::open(format!("redis://{addr}/")).unwrap();
        let mut c = client.get_connection().unwrap();
        redis::cmd("CONFIG").arg("RESETSTAT").exec(&mut c).unwrap();
    }
}

/// `valkey-cli` beside the server binary.
pub fn cli() -> std::path::PathBuf {
    limiter_tests::valkey::binary()
        .expect("valkey-server")
        .with_file_name("valkey-cli")
}

/// Runs `valkey-cli -h/-p <addr> args…` and returns its stdout.
pub fn cli_run(addr: &str, args: &[&str]) -> String {
    let (host, port) = addr.rsplit_once(':').unwrap();
    let out = Command::new(cli())
        .args(["-h", host, "-p", port])
        .args(args)
        .output()
        .expect("run valkey-cli");
    assert!(
        out.status.success(),
        "valkey-cli {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
