//! Two engines, each with its own `FleetStore` on one real `valkey-server` (two hosts of a
//! fleet in one process, told apart by `host_id`): a lockout made on A reaches B's kernel sink
//! through the stream, and a lift on B reaches A's.

use std::sync::Arc;
use std::time::Duration;

use crate::rig::{ip, RecordingSink, SinkEvent};
use limiter_daemon::clock::SystemClock;
use limiter_daemon::config::{Config, EnvMap};
use limiter_daemon::engine::Engine;

fn host(addr: &str, name: &str, dir: &std::path::Path, sink: Arc<RecordingSink>) -> Arc<Engine> {
    let text = format!(
        "[store]\nbackend = \"valkey\"\nvalkey_address = \"{addr}\"\nkey_prefix = \"fe:\"\n\
         host_id = \"{name}\"\nstate_dir = \"{}\"\n",
        dir.display()
    );
    let cfg = Config::from_toml_str(&text, "fleet.toml".as_ref(), &EnvMap::new()).unwrap();
    let e = Arc::new(Engine::open(Arc::new(cfg), sink, Arc::new(SystemClock)).unwrap());
    e.follow_fleet();
    e
}

#[test]
fn a_lockout_on_one_engine_reaches_the_others_kernel_and_a_lift_comes_back() {
    let Some(server) = limiter_tests::valkey::start() else {
        return;
    };
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (sink_a, sink_b) = (
        Arc::new(RecordingSink::default()),
        Arc::new(RecordingSink::default()),
    );
    let a = host(&server.addr, "a", da.path(), sink_a.clone());
    let b = host(&server.addr, "b", db.path(), sink_b.clone());
    let who = ip("198.18.0.1");
    a.lockouts().lock(who, Duration::from_secs(60)).unwrap();
    limiter_tests::poll(Duration::from_secs(10), "B's kernel told", || {
        sink_b
            .events()
            .iter()
            .any(|e| matches!(e, SinkEvent::Lock { ip, .. } if *ip == who))
            .then_some(())
    });
    assert!(
        b.lockouts().get(who).unwrap().is_some(),
        "B's store answers it"
    );
    assert!(b.lockouts().lift(who).unwrap().is_some());
    limiter_tests::poll(
        Duration::from_secs(10),
        "A's kernel told of the lift",
        || {
            sink_a
                .events()
                .iter()
                .any(|e| matches!(e, SinkEvent::Unlock { ip } if *ip == who))
                .then_some(())
        },
    );
    assert!(a.lockouts().get(who).unwrap().is_none());
}
