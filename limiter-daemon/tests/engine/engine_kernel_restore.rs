//! After a reboot the kernel's maps are empty (bpffs is in memory) but the state directory keeps
//! lockouts and allow/deny lists: building the engine on the real dataplane pushes them back, and
//! the kernel drops the locked and denied sources again. The dataplane is the real eBPF object
//! attached (TC) to a veth pair in namespaces this test creates, maps pinned under a private
//! directory. Needs root and the built object (`cargo xtask build-ebpf`): skipped outside CI
//! without them, a failure under `CI=true`.

use crate::kernel_support;

use std::sync::Arc;
use std::time::Duration;

use crate::rig::*;
use limiter_daemon::clock::ManualClock;
use limiter_daemon::config::Config;
use limiter_daemon::embedded::EmbeddedStore;
use limiter_daemon::engine::sink::{EnforcementSink, NoKernel};
use limiter_daemon::engine::{Engine, EngineOptions, KeyRefresh};
use limiter_daemon::model::{ListEntry, ListKind};

fn engine(cfg: &Arc<Config>, clock: &ManualClock, sink: Arc<dyn EnforcementSink>) -> Engine {
    let store = Arc::new(EmbeddedStore::open(&cfg.store, T0).expect("store opens"));
    Engine::with_options(
        Arc::clone(cfg),
        store,
        sink,
        Arc::new(clock.clone()),
        EngineOptions {
            key_refresh: KeyRefresh::Manual,
        },
    )
}

#[test]
fn stored_lockouts_and_lists_reach_the_kernel_at_start() {
    let Some(kernel_support::Dataplane {
        pair,
        listener,
        port,
        pins,
    }) = kernel_support::dataplane("lmr", 3, "limiter-restore-")
    else {
        return;
    };
    let [locked, denied, free] = [0, 1, 2].map(|i| pair.client_ips[i]);
    let state = tempfile::tempdir().unwrap();
    let text = format!(
        "[kernel]\nmode = \"required\"\nattach = \"tc\"\ninterfaces = [\"{}\"]\npin_path = \"{}\"\n\
         protected_ports = [{port}]\n",
        pair.server_if,
        pins.0.display()
    );
    let cfg = Arc::new(config(&text, state.path()));
    let clock = ManualClock::new(T0);

    // Before the "reboot": a daemon without the kernel stored a lockout and list entries.
    {
        let before = engine(&cfg, &clock, Arc::new(NoKernel));
        before
            .lockouts()
            .lock(locked.into(), Duration::from_secs(300))
            .unwrap();
        let entry = |net: String| ListEntry {
            net: net.parse().unwrap(),
            until_ms: None,
            comment: String::new(),
        };
        let lists = before.lists();
        lists
            .add(ListKind::Deny, entry(format!("{denied}/32")))
            .unwrap();
        lists
            .add(ListKind::Allow, entry("10.99.0.0/16".into()))
            .unwrap();
    }
    // The kernel starts empty: every client gets through.
    let (rt, dp) = kernel_support::attach(&pair, &cfg.kernel);
    let maps = Arc::clone(dp.maps());
    assert!(maps.lockouts().unwrap().is_empty());
    assert!(pair.connect_from(locked, port, Duration::from_secs(3)));

    // `run` builds the engine after the dataplane started: that pushes the stored state.
    clock.advance_ms(100_000);
    let _engine = engine(&cfg, &clock, Arc::new(dp));
    let l = maps
        .lockout(locked.into())
        .unwrap()
        .expect("lockout restored");
    assert_eq!(l.level, 1);
    let left = l.remaining.expect("still active").as_secs();
    assert!((195..=200).contains(&left), "200 s were left: {left}");
    let deny = maps.deny_list().unwrap();
    assert_eq!(deny.len(), 1, "{deny:?}");
    assert_eq!(deny[0].cidr, format!("{denied}/32").parse().unwrap());
    assert_eq!(deny[0].remaining, None);
    assert_eq!(
        maps.allow_list().unwrap(),
        vec!["10.99.0.0/16".parse().unwrap()]
    );
    // And the kernel enforces them on real handshakes.
    assert!(
        !pair.connect_from(locked, port, Duration::from_secs(1)),
        "locked"
    );
    assert!(
        !pair.connect_from(denied, port, Duration::from_secs(1)),
        "denied"
    );
    assert!(
        pair.connect_from(free, port, Duration::from_secs(3)),
        "others pass"
    );

    drop(listener);
    drop(_engine);
    drop(rt);
    drop(pins);
}
