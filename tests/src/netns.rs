//! Network namespaces and veth pairs that a test creates and removes (on drop, even on panic),
//! plus TCP helpers that run inside a namespace.
//!
//! Code runs "inside" a namespace on a thread of its own that has `setns(CLONE_NEWNET)`: only
//! that thread switches, and sockets it creates stay in the namespace for their whole life.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A unique name with `prefix`, short enough for interface and namespace names.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}{}x{}",
        std::process::id() % 100_000,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs a command, panicking with its output if it fails.
pub fn run(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// True when the `ip` tool can manage namespaces here (root, iproute2 installed).
pub fn netns_available() -> bool {
    crate::is_root()
        && Command::new("ip")
            .args(["netns", "list"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
}

/// True when a test may attach the real eBPF object to a veth pair it creates: root, iproute2
/// and the object built by `cargo xtask build-ebpf` (see `crate::require`: a skip with a message
/// outside CI, a panic under `CI=true`).
pub fn require_dataplane() -> bool {
    crate::require(
        netns_available(),
        "root and iproute2 (network namespaces, BPF)",
    ) && crate::require(
        crate::testrun::object_path().is_file(),
        "the built eBPF object (`cargo xtask build-ebpf`)",
    )
}

/// A named network namespace, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    pub fn new(prefix: &str) -> Self {
        let name = unique_name(prefix);
        run(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace's bind mount, usable with `nsenter --net=`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/var/run/netns").join(&self.name)
    }

    /// `ip -n <ns> <args>`.
    pub fn ip(&self, args: &[&str]) -> String {
        run(Command::new("ip").arg("-n").arg(&self.name).args(args))
    }

    /// Runs `f` on a thread that has entered this namespace and returns its result.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let file = File::open(self.path())
            .unwrap_or_else(|e| panic!("opening {}: {e}", self.path().display()));
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: setns on a valid namespace fd; it changes only this thread's network
                // namespace, and the thread ends with the scope.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .expect("thread inside the namespace panicked")
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace destroys its veth end (and so the pair).
        let out = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
        if let Ok(o) = out {
            if !o.status.success() {
                eprintln!(
                    "removing netns {}: {}",
                    self.name,
                    String::from_utf8_lossy(&o.stderr)
                );
            }
        }
    }
}

/// Two namespaces joined by a veth pair: a server side with one address and a client side with
/// several (one per simulated client).
#[derive(Debug)]
pub struct VethPair {
    // Field order matters for drop: the client namespace goes first, then the server's.
    pub client: Netns,
    pub server: Netns,
    pub server_if: String,
    pub client_if: String,
    pub server_ip: Ipv4Addr,
    pub client_ips: Vec<Ipv4Addr>,
}

impl VethPair {
    /// `10.77.0.1/24` on the server side, `10.77.0.2 ..= 10.77.0.(1+clients)` on the client side
    /// (the namespaces are private, so every test can use the same addresses).
    pub fn new(prefix: &str, clients: u8) -> Self {
        let pair = VethPair {
            client: Netns::new(&format!("{prefix}c")),
            server: Netns::new(&format!("{prefix}s")),
            server_if: "lim-srv".to_string(),
            client_if: "lim-cli".to_string(),
            server_ip: Ipv4Addr::new(10, 77, 0, 1),
            client_ips: (0..clients)
                .map(|i| Ipv4Addr::new(10, 77, 0, 2 + i))
                .collect(),
        };
        pair.create_link();
        pair
    }

    fn create_link(&self) {
        self.server.ip(&[
            "link",
            "add",
            &self.server_if,
            "type",
            "veth",
            "peer",
            "name",
            &self.client_if,
            "netns",
            self.client.name(),
        ]);
        let server_cidr = format!("{}/24", self.server_ip);
        self.server
            .ip(&["addr", "add", &server_cidr, "dev", &self.server_if]);
        self.server.ip(&["link", "set", &self.server_if, "up"]);
        for ip in &self.client_ips {
            self.client
                .ip(&["addr", "add", &format!("{ip}/24"), "dev", &self.client_if]);
        }
        self.client.ip(&["link", "set", &self.client_if, "up"]);
    }

    /// Deletes the veth pair and creates it again with the same names and addresses (a new
    /// interface index: whatever was attached to the old one is gone with it).
    pub fn recreate_link(&self) {
        self.server.ip(&["link", "del", &self.server_if]);
        self.create_link();
    }

    /// A TCP listener on the server side (port chosen by the kernel), with a backlog large enough
    /// that unaccepted connections never fill it during a test.
    pub fn listen(&self) -> TcpListener {
        let ip = self.server_ip;
        self.server.run(move || {
            let sock = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
            sock.bind(&SocketAddr::V4(SocketAddrV4::new(ip, 0)).into())
                .unwrap();
            sock.listen(1024).unwrap();
            TcpListener::from(sock)
        })
    }

    /// One TCP connection attempt from `from` (a client address) to the server's `port`:
    /// `true` when the handshake completed within `timeout`.
    pub fn connect_from(&self, from: Ipv4Addr, port: u16, timeout: Duration) -> bool {
        let to = SocketAddr::V4(SocketAddrV4::new(self.server_ip, port));
        self.client.run(move || {
            let sock = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
            sock.bind(&SocketAddr::V4(SocketAddrV4::new(from, 0)).into())
                .unwrap();
            sock.connect_timeout(&to.into(), timeout).is_ok()
        })
    }

    /// One HTTP/1.1 `GET path` from `from` to the server's `port` with `headers` (connection
    /// closed after it): the answer's status, or `None` when no connection was made within
    /// `timeout` (dropped by the kernel) or no status line came back.
    pub fn http_get_from(
        &self,
        from: Ipv4Addr,
        port: u16,
        path: &str,
        headers: &[(&str, &str)],
        timeout: Duration,
    ) -> Option<u16> {
        use std::io::{Read, Write};
        let to = SocketAddr::V4(SocketAddrV4::new(self.server_ip, port));
        let mut req = format!("GET {path} HTTP/1.1\r\nhost: limiter-test\r\nconnection: close\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        self.client.run(move || {
            let sock = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
            sock.bind(&SocketAddr::V4(SocketAddrV4::new(from, 0)).into())
                .unwrap();
            sock.connect_timeout(&to.into(), timeout).ok()?;
            let mut stream = std::net::TcpStream::from(sock);
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .ok()?;
            stream.write_all(req.as_bytes()).ok()?;
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer);
            let text = String::from_utf8_lossy(&answer);
            text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
        })
    }

    /// A plain HTTP/1.1 server on the server side answering every request `200` with an empty
    /// body (an upstream for a proxy under test); runs until the process ends.
    pub fn serve_ok(&self) -> SocketAddr {
        use std::io::{Read, Write};
        let listener = self.listen();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let mut seen = Vec::new();
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                        seen.drain(..seen.len().saturating_sub(4096));
                    }
                    let _ = s.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    );
                });
            }
        });
        addr
    }

    /// Names of the BPF programs attached to the server interface: XDP (from netlink) and TCX
    /// ingress (queried with aya inside the namespace).
    pub fn attached_programs(&self) -> Vec<String> {
        let mut names = Vec::new();
        let json = self
            .server
            .ip(&["-j", "-d", "link", "show", "dev", &self.server_if]);
        let v: serde_json::Value = serde_json::from_str(&json).expect("ip -j output");
        if let Some(xdp) = v.get(0).and_then(|l| l.get("xdp")) {
            match xdp.get("attached").and_then(|a| a.as_array()) {
                Some(list) => names.extend(list.iter().map(prog_name)),
                None => names.push(prog_name(xdp)),
            }
        }
        let iface = self.server_if.clone();
        let tcx = self.server.run(move || {
            aya::programs::SchedClassifier::query_tcx(&iface, aya::programs::TcAttachType::Ingress)
        });
        match tcx {
            Ok((_, progs)) => names.extend(
                progs
                    .iter()
                    .map(|p| format!("tcx:{}", p.name_as_str().unwrap_or("?"))),
            ),
            Err(e) => panic!("querying TCX programs on {}: {e}", self.server_if),
        }
        names
    }
}

fn prog_name(v: &serde_json::Value) -> String {
    let mode = match v.get("mode").and_then(|m| m.as_u64()) {
        Some(1) => "xdp",
        Some(2) => "xdpgeneric",
        Some(3) => "xdpoffload",
        _ => "xdp?",
    };
    let name = v
        .get("prog")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or("?");
    format!("{mode}:{name}")
}
