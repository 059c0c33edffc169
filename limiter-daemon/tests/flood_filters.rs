//! The flood benchmark's machinery is honest (`cargo xtask bench flood`, `benches/flood.rs`):
//! on the same namespaces, veth pair, sender and filters the bench measures, each filter drops
//! every SYN the sender writes from a locked source and still lets an unlocked source's real
//! handshake through, and with no filter every SYN reaches TCP. Needs root, iproute2, nftables,
//! ethtool and the built eBPF object: skipped outside CI without them, a failure under `CI=true`.

#[path = "../benches/common/flood/mod.rs"]
mod flood;

use std::process::Command;
use std::time::Duration;

use flood::filter::{Installed, Kind};
use flood::live::LiveSender;
use flood::sender::{Sender, BATCH};
use flood::topology::Topology;
use limiter_tests::netns::require_dataplane;
use limiter_tests::{poll, require};

/// SYNs each test writes: a few batches, every locked source many times over.
const SYNS: usize = 20 * BATCH;

fn tool(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn rig(tag: &str) -> Option<(Topology, Vec<std::net::Ipv4Addr>, Sender)> {
    if !require_dataplane()
        || !require(tool("nft"), "nftables (`nft`)")
        || !require(tool("ethtool"), "ethtool")
    {
        return None;
    }
    // SAFETY: set before this test starts a thread that reads the environment; the loader looks
    // the object up through it (as the other dataplane tests do).
    unsafe { std::env::set_var("LIMITER_EBPF_OBJECT", limiter_tests::testrun::object_path()) };
    let topo = Topology::new(tag);
    let locked = flood::locked_sources(10);
    let sender = Sender::new(&topo.sender, &topo.sender_if, &locked, &topo.dest());
    Some((topo, locked, sender))
}

/// Writes `SYNS` from the locked sources one batch at a time, waiting (with a deadline) for
/// the filter to count each batch, so the veth never drops one for a full ring.
fn flood_and_count(sender: &mut Sender, filter: &Installed) -> u64 {
    let start = filter.dropped();
    for sent in (BATCH..=SYNS).step_by(BATCH) {
        sender.send(BATCH);
        poll(
            Duration::from_secs(10),
            "the filter to count the batch",
            || (filter.dropped() - start >= sent as u64).then_some(()),
        );
    }
    filter.dropped() - start
}

fn drops_locked_and_passes_unlocked(kind: Kind, tag: &str) {
    let Some((topo, locked, mut sender)) = rig(tag) else {
        return;
    };
    let filter = Installed::install(kind, &topo, &locked);
    let rx_before = topo.receiver_rx_packets();
    let tcp_before = topo.snmp("Tcp", "InSegs");
    assert_eq!(
        flood_and_count(&mut sender, &filter),
        SYNS as u64,
        "{}: every locked SYN dropped, once",
        kind.label()
    );
    assert!(
        topo.receiver_rx_packets() - rx_before >= SYNS as u64,
        "the veth took every SYN in"
    );
    assert_eq!(
        topo.snmp("Tcp", "InSegs"),
        tcp_before,
        "{}: no locked SYN reached TCP",
        kind.label()
    );
    assert!(
        topo.handshake(Duration::from_secs(5)),
        "{}: an unlocked source's handshake passes",
        kind.label()
    );
}

#[test]
fn xdp_drops_every_locked_syn_and_passes_an_unlocked_handshake() {
    drops_locked_and_passes_unlocked(Kind::Xdp, "ffx");
}

#[test]
fn nft_input_set_drops_every_locked_syn_and_passes_an_unlocked_handshake() {
    drops_locked_and_passes_unlocked(Kind::NftInput, "ffi");
}

#[test]
fn nft_ingress_set_drops_every_locked_syn_and_passes_an_unlocked_handshake() {
    drops_locked_and_passes_unlocked(Kind::NftIngress, "ffg");
}

/// The bench's second sender: frames redirected by the kernel's live-frames test run arrive as
/// `xdp_frame`s and meet the same filters.
#[test]
fn live_frames_reach_the_receiver_and_the_filters_drop_them() {
    let Some((topo, locked, _sender)) = rig("ffl") else {
        return;
    };
    // One NAPI batch per run, well inside the veth's ring, so none is lost before the filter.
    let mut live = LiveSender::new(&topo.sender, &topo.sender_if, &locked, &topo.dest(), 64);
    for kind in [Kind::Xdp, Kind::NftInput] {
        let filter = Installed::install(kind, &topo, &locked);
        let start = filter.dropped();
        for runs in 1..=10u64 {
            topo.sender.run(|| live.send_runs(1));
            poll(
                Duration::from_secs(10),
                "the filter to count the run",
                || (filter.dropped() - start >= runs * 64).then_some(()),
            );
        }
        assert_eq!(filter.dropped() - start, 640, "{}", kind.label());
        assert!(topo.handshake(Duration::from_secs(5)), "{}", kind.label());
    }
}

#[test]
fn without_a_filter_every_syn_reaches_tcp() {
    let Some((topo, locked, mut sender)) = rig("ffn") else {
        return;
    };
    // Given the same sources as the others, "no filter" must still drop none of them.
    let filter = Installed::install(Kind::None, &topo, &locked);
    let before = topo.snmp("Tcp", "InSegs");
    for sent in (BATCH..=SYNS).step_by(BATCH) {
        sender.send(BATCH);
        poll(Duration::from_secs(10), "TCP to take the batch in", || {
            (topo.snmp("Tcp", "InSegs") - before >= sent as u64).then_some(())
        });
    }
    assert_eq!(filter.dropped(), 0);
    assert!(topo.handshake(Duration::from_secs(5)));
}

#[test]
fn the_receivers_cpu_is_its_napi_thread_and_grows_with_the_flood() {
    let Some((topo, locked, mut sender)) = rig("ffc") else {
        return;
    };
    let filter = Installed::install(Kind::NftInput, &topo, &locked);
    let napi = topo.receiver_napi();
    let rx = flood::cpu::ReceiverCpu::pinned(napi, flood::cpu::cpus() - 1);
    let before = rx.ns();
    let napi_before = flood::cpu::run_ns(napi);
    flood_and_count(&mut sender, &filter);
    assert!(
        flood::cpu::run_ns(napi) > napi_before,
        "the NAPI thread did the receiving"
    );
    assert!(rx.ns() > before);
}
