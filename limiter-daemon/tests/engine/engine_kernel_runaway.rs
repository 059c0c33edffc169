//! A runaway loop after its budget is spent reaches the kernel: the strikes it earns are
//! lockouts in the real eBPF program's map (attached with TC to a veth pair in namespaces this
//! test creates, maps pinned under a private directory), at the level the engine made, and the
//! kernel drops the looping address's handshakes. Needs root and the built object
//! (`cargo xtask build-ebpf`): skipped outside CI without them, a failure under `CI=true`.

use crate::kernel_support;

use std::sync::Arc;
use std::time::Duration;

use crate::rig::*;
use limiter_daemon::clock::ManualClock;
use limiter_daemon::embedded::EmbeddedStore;
use limiter_daemon::engine::{Engine, EngineOptions, KeyRefresh};

#[test]
fn a_runaway_loop_after_its_budget_is_spent_is_locked_out_in_the_kernel() {
    let Some(kernel_support::Dataplane {
        pair,
        listener,
        port,
        pins,
    }) = kernel_support::dataplane("lmw", 2, "limiter-runaway-")
    else {
        return;
    };
    let [looping, polite] = [0, 1].map(|i| pair.client_ips[i]);
    let state = tempfile::tempdir().unwrap();
    let text = format!(
        "[kernel]\nmode = \"required\"\nattach = \"tc\"\ninterfaces = [\"{}\"]\npin_path = \"{}\"\n\
         protected_ports = [{port}]\n",
        pair.server_if,
        pins.0.display()
    );
    let cfg = Arc::new(config(&text, state.path()));
    let (rt, dp) = kernel_support::attach(&pair, &cfg.kernel);
    let maps = Arc::clone(dp.maps());
    let clock = ManualClock::new(T0);
    let store = Arc::new(EmbeddedStore::open(&cfg.store, T0).expect("store opens"));
    let engine = Engine::with_options(
        Arc::clone(&cfg),
        store,
        Arc::new(dp),
        Arc::new(clock.clone()),
        EngineOptions {
            key_refresh: KeyRefresh::Manual,
        },
    );

    let polite_run = drive(
        &engine,
        &clock,
        &polite.to_string(),
        &polite_crawler_after_budget(),
    );
    assert!(polite_run.iter().all(|d| d.lockout_level.is_none()));
    assert!(
        maps.lockout(polite.into()).unwrap().is_none(),
        "the polite crawler is not locked"
    );

    let run = drive(
        &engine,
        &clock,
        &looping.to_string(),
        &runaway_loop_after_budget(),
    );
    let levels: Vec<u32> = run.iter().filter_map(|d| d.lockout_level).collect();
    assert!(levels.len() >= 2 && levels[..2] == [1, 2], "{levels:?}");
    let entry = maps
        .lockout(looping.into())
        .unwrap()
        .expect("the runaway loop is locked out in the kernel");
    assert_eq!(
        entry.level,
        *levels.last().unwrap(),
        "the escalation reached the kernel"
    );
    assert!(entry.remaining.is_some_and(|r| r > Duration::ZERO));
    assert!(
        !pair.connect_from(looping, port, Duration::from_secs(1)),
        "the kernel drops the loop's handshakes"
    );
    assert!(
        pair.connect_from(polite, port, Duration::from_secs(3)),
        "the polite crawler still connects"
    );

    drop(engine);
    drop(listener);
    drop(rt);
    drop(pins);
}
