//! BPF_PROG_TEST_RUN tests of the real kernel program: parsing, the verdict order, the connection
//! ceiling, lockouts and lists, with every verdict and the counter it moved asserted.

use std::net::IpAddr;

use limiter_common::{verdict, KernelConfig};
use limiter_tests::frames::{Frame, TCP_ACK, TCP_SYN};
use limiter_tests::testrun::{counter_name, Instance, XDP_DROP, XDP_PASS};

const PORT: u16 = 443;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn config() -> KernelConfig {
    KernelConfig {
        ceiling_burst: [3, 5, 8],
        ceiling_per_sec: [1, 1, 1],
        ..KernelConfig::default()
    }
}

fn setup() -> Option<Instance> {
    let mut k = Instance::load()?;
    k.set_config(&config());
    k.protect(PORT);
    Some(k)
}

#[track_caller]
fn expect(k: &mut Instance, frame: &[u8], action: u32, counter: u32) {
    let (a, c) = k.xdp_counted(frame);
    assert_eq!(
        (a, counter_name(c)),
        (action, counter_name(counter)),
        "frame of {} bytes",
        frame.len()
    );
}

#[test]
fn smoke_syn_ceiling() {
    let Some(mut k) = setup() else { return };
    let syn = Frame::tcp(ip("192.0.2.7"), PORT, TCP_SYN).build();
    for _ in 0..3 {
        expect(&mut k, &syn, XDP_PASS, verdict::PASS_SYN);
    }
    expect(&mut k, &syn, XDP_DROP, verdict::DROP_CEILING);
    let ack = Frame::tcp(ip("192.0.2.7"), PORT, TCP_ACK).build();
    expect(&mut k, &ack, XDP_PASS, verdict::PASS_CLEAN);
}
