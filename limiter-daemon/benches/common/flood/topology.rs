//! The two namespaces and the veth pair between them, set up so the receiver's packet work runs
//! on one kernel thread that can be pinned and timed.
//!
//! A veth delivers a frame to its peer in one of two ways: straight into the peer's backlog
//! (`netif_rx`, processed by softirq on whichever CPU sent it), or, when the peer has NAPI
//! enabled, into the peer's ring for its NAPI poll. NAPI is enabled by an XDP program on the
//! receiving end or by GRO on it (the peer needs nothing for frames the stack sends; only
//! `XDP_REDIRECT` *into* a veth needs its peer in NAPI mode). Without XDP the veth still skips
//! NAPI for a frame when the *sending* end offers TSO (`veth_skb_is_eligible_for_gro`), so TSO is
//! off on both ends (attaching XDP turns it off on the peer by itself). With NAPI on, `threaded` moves the
//! poll into a kernel thread `napi/<ifname>-<id>`, which is what makes the receiver's CPU
//! measurable on a shared machine. So both ends get GRO and threaded NAPI, for every filter: the
//! receiver's thread does all the receiving (XDP, the stack, nftables, TCP's answers), and the
//! sender's thread takes the SYN-ACKs the stack sends back, so they are not charged to the
//! receiver.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::process::Command;
use std::time::Duration;

use limiter_tests::netns::{run, unique_name, Netns};
use socket2::{Domain, Protocol, Socket, Type};

use super::frames::Dest;

pub const RECEIVER_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
/// The sender's own address: the unlocked source whose handshakes must pass every filter.
pub const SENDER_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
const RECEIVER_MAC: [u8; 6] = [0x02, 0x78, 0, 0, 0, 0x01];
const SENDER_MAC: [u8; 6] = [0x02, 0x78, 0, 0, 0, 0x02];

fn mac(m: [u8; 6]) -> String {
    m.map(|b| format!("{b:02x}")).join(":")
}

/// Sender and receiver namespaces (removed on drop, the veth pair with them) and a listener on
/// the receiver's protected port.
pub struct Topology {
    pub listener: TcpListener,
    pub port: u16,
    pub receiver_if: String,
    pub sender_if: String,
    // Dropped last: deleting a namespace destroys its veth end and so the pair.
    pub sender: Netns,
    pub receiver: Netns,
}

impl Topology {
    pub fn new(tag: &str) -> Self {
        let sender = Netns::new(&format!("{tag}s"));
        let receiver = Netns::new(&format!("{tag}r"));
        // Unique interface names: the NAPI threads are named after them, in one global list, cut
        // to 15 bytes, so the side comes first where the cut cannot reach it.
        let base = unique_name("f");
        let (receiver_if, sender_if) = (format!("r{base}"), format!("s{base}"));
        receiver.ip(&[
            "link",
            "add",
            &receiver_if,
            "address",
            &mac(RECEIVER_MAC),
            "type",
            "veth",
            "peer",
            "name",
            &sender_if,
            "address",
            &mac(SENDER_MAC),
            "netns",
            sender.name(),
        ]);
        receiver.ip(&[
            "addr",
            "add",
            &format!("{RECEIVER_IP}/24"),
            "dev",
            &receiver_if,
        ]);
        sender.ip(&["addr", "add", &format!("{SENDER_IP}/24"), "dev", &sender_if]);
        receiver.ip(&["link", "set", &receiver_if, "up"]);
        sender.ip(&["link", "set", &sender_if, "up"]);
        // The flood's sources are anywhere: route the answers back through the pair, to a
        // neighbour that is always resolved, as a real host's default route would.
        receiver.ip(&["route", "add", "default", "via", &SENDER_IP.to_string()]);
        receiver.ip(&[
            "neigh",
            "replace",
            &SENDER_IP.to_string(),
            "lladdr",
            &mac(SENDER_MAC),
            "dev",
            &receiver_if,
            "nud",
            "permanent",
        ]);
        let listener = listen(&receiver);
        let port = listener.local_addr().unwrap().port();
        let topo = Topology {
            listener,
            port,
            receiver_if,
            sender_if,
            sender,
            receiver,
        };
        for (ns, iface) in [
            (&topo.receiver, &topo.receiver_if),
            (&topo.sender, &topo.sender_if),
        ] {
            run(Command::new("ip").args([
                "netns",
                "exec",
                ns.name(),
                "ethtool",
                "-K",
                iface,
                "gro",
                "on",
                "tso",
                "off",
            ]));
            // Through `ip netns exec`, which mounts the namespace's own /sys.
            let threaded = format!("echo 1 > /sys/class/net/{iface}/threaded");
            run(Command::new("ip").args(["netns", "exec", ns.name(), "sh", "-c", &threaded]));
        }
        topo
    }

    /// Where the sender's frames go.
    pub fn dest(&self) -> Dest {
        Dest {
            src_mac: SENDER_MAC,
            dst_mac: RECEIVER_MAC,
            ip: RECEIVER_IP,
            port: self.port,
        }
    }

    /// The receiver's NAPI thread (it exists while NAPI is on: from GRO, or an XDP program).
    pub fn receiver_napi(&self) -> i32 {
        napi_thread(&self.receiver_if)
    }

    pub fn sender_napi(&self) -> i32 {
        napi_thread(&self.sender_if)
    }

    /// Packets the receiver's veth took in (its NAPI poll counts each, whatever XDP decides).
    pub fn receiver_rx_packets(&self) -> u64 {
        let json = self
            .receiver
            .ip(&["-j", "-s", "link", "show", "dev", &self.receiver_if]);
        let v: serde_json::Value = serde_json::from_str(&json).expect("ip -j -s link output");
        v[0]["stats64"]["rx"]["packets"]
            .as_u64()
            .unwrap_or_else(|| panic!("no rx packet count in {json}"))
    }

    /// A counter of the receiver's `/proc/net/snmp` (e.g. `("Tcp", "InSegs")`).
    pub fn snmp(&self, group: &str, field: &str) -> u64 {
        let text = self
            .receiver
            .run(|| std::fs::read_to_string("/proc/thread-self/net/snmp"))
            .expect("reading the receiver's /proc/net/snmp");
        let mut lines = text.lines().filter(|l| l.starts_with(&format!("{group}:")));
        let (names, values) = (lines.next().unwrap(), lines.next().unwrap());
        let i = names
            .split_whitespace()
            .position(|n| n == field)
            .unwrap_or_else(|| panic!("no {group} {field} in {names}"));
        values.split_whitespace().nth(i).unwrap().parse().unwrap()
    }

    /// One real handshake from the sender's own (unlocked) address to the protected port.
    pub fn handshake(&self, timeout: Duration) -> bool {
        let to = SocketAddr::V4(SocketAddrV4::new(RECEIVER_IP, self.port));
        self.sender.run(move || {
            let sock = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
            sock.bind(&SocketAddr::V4(SocketAddrV4::new(SENDER_IP, 0)).into())
                .unwrap();
            sock.connect_timeout(&to.into(), timeout).is_ok()
        })
    }
}

/// A listener whose accept queue is never drained: the flood's SYNs meet a real socket, as on
/// a real server, and once its queue is full the stack answers with SYN cookies.
fn listen(ns: &Netns) -> TcpListener {
    ns.run(|| {
        let sock = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        sock.bind(&SocketAddr::V4(SocketAddrV4::new(RECEIVER_IP, 0)).into())
            .unwrap();
        sock.listen(1024).unwrap();
        TcpListener::from(sock)
    })
}

/// The pid of the kernel thread `napi/<iface>-<id>` (its name cut to 15 bytes, as the kernel
/// keeps it).
fn napi_thread(iface: &str) -> i32 {
    let want = format!("napi/{iface}-");
    let want = &want[..want.len().min(15)];
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("listing /proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) {
            if comm.trim_end().starts_with(want) {
                found.push(pid);
            }
        }
    }
    match found.as_slice() {
        [pid] => *pid,
        _ => panic!("expected one NAPI thread named {want}*, found {found:?}"),
    }
}
