//! What the daemon's tests on the real dataplane share (each area's `main.rs` includes it by path):
//! a private pin directory under bpffs whose programs and maps are detached on drop, and the
//! veth pair with a listening server that every such test starts from. It needs the daemon's
//! kernel types, so it lives here rather than in `limiter-tests`.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of this module"
)]

use std::net::TcpListener;
use std::path::PathBuf;

use limiter_daemon::kernel::loader::detach;
use limiter_daemon::kernel::PinLayout;
use limiter_tests::netns::{require_dataplane, unique_name, VethPair};
use limiter_tests::testrun::object_path;

/// A unique directory under `/sys/fs/bpf`; everything pinned there is removed on drop, even
/// when the test fails.
pub struct Pins(pub PathBuf);

impl Pins {
    pub fn new(prefix: &str) -> Self {
        Pins(PathBuf::from("/sys/fs/bpf").join(unique_name(prefix)))
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        if self.0.exists() {
            if let Err(e) = detach(&PinLayout::new(&self.0)) {
                eprintln!("detaching {}: {e}", self.0.display());
            }
        }
    }
}

/// Two namespaces joined by a veth pair (`clients` client addresses), a TCP listener on the
/// server side, and a private pin directory. Fields are dropped in the order the test chooses.
pub struct Dataplane {
    pub pair: VethPair,
    pub listener: TcpListener,
    pub port: u16,
    pub pins: Pins,
}

/// Sets up a [`Dataplane`] fixture, or returns `None` when the test should skip (outside CI,
/// without root, iproute2 or the built object; under `CI=true` that panics instead).
pub fn dataplane(tag: &str, clients: u8, pin_prefix: &str) -> Option<Dataplane> {
    if !require_dataplane() {
        return None;
    }
    // SAFETY: set before any thread of this test reads the environment; the loader looks the
    // object up through this variable.
    unsafe { std::env::set_var("LIMITER_EBPF_OBJECT", object_path()) };
    let pair = VethPair::new(tag, clients);
    let listener = pair.listen();
    let port = listener.local_addr().unwrap().port();
    Some(Dataplane {
        pair,
        listener,
        port,
        pins: Pins::new(pin_prefix),
    })
}

/// Attaches the dataplane from inside `pair`'s server namespace (where its interface is);
/// the runtime that runs the dataplane's background tasks comes back with it and must be kept
/// alive as long as the dataplane.
pub fn attach(
    pair: &VethPair,
    kernel: &limiter_daemon::config::kernel::KernelSettings,
) -> (
    tokio::runtime::Runtime,
    limiter_daemon::kernel::dataplane::Dataplane,
) {
    pair.server.run(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let dp = rt
            .block_on(async {
                limiter_daemon::kernel::dataplane::Dataplane::start_required(
                    kernel,
                    &tokio_util::sync::CancellationToken::new(),
                )
            })
            .expect("dataplane attaches to the veth");
        (rt, dp)
    })
}
