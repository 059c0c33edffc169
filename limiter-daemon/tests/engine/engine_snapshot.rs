//! Budgets survive a restart: the embedded store snapshots its hourly, daily and burst counters
//! into the state directory, loads what is still inside its window at start, and sets a
//! corrupt snapshot aside. A crash (the store dropped without the final snapshot) loses at
//! most one snapshot interval, checked on the injected clock.

use crate::rig::*;
use limiter_daemon::embedded::snapshot::SNAPSHOT_FILE;
use limiter_daemon::engine::{Action, Decision, Reason, WindowKind};

const PEER: &str = "192.0.2.44";

fn remaining(d: &Decision, kind: WindowKind) -> u32 {
    u32::try_from(window_remaining(d, kind)).unwrap()
}

fn window_remaining(d: &Decision, kind: WindowKind) -> u64 {
    d.windows
        .iter()
        .find(|w| w.kind == kind)
        .unwrap_or_else(|| panic!("{kind:?} applies: {d:?}"))
        .remaining
}

/// Stops `r` the way a clean stop does (final snapshot) or a crash does (none), and starts a
/// new engine on the same state directory at `restart_ms`.
fn restart(r: Rig, toml_text: &str, final_snapshot: bool, restart_ms: u64) -> Rig {
    if final_snapshot {
        let n = r.engine.store().persist_counters(r.clock_now()).unwrap();
        assert!(n.is_some_and(|n| n > 0), "the embedded store snapshots");
    }
    let Rig { engine, dir, .. } = r;
    drop(engine);
    rig_in(toml_text, dir, restart_ms)
}

#[test]
fn an_hourly_budget_survives_a_clean_restart() {
    let toml = "[tiers.anon]\nhourly = 20\n";
    let r = rig(toml);
    for _ in 0..10 {
        assert_eq!(r.get(PEER, "/").action(), Action::Allow);
    }
    let r = restart(r, toml, true, T0 + 5_000);
    for n in 0..10 {
        let d = r.get(PEER, "/");
        assert_eq!(d.action(), Action::Allow, "request {} after restart", n + 1);
    }
    let d = r.get(PEER, "/");
    assert_eq!(
        (d.action(), d.reason()),
        (Action::Reject, Some(Reason::Hourly))
    );
}

#[test]
fn the_burst_window_survives_a_clean_restart() {
    let toml = "[tiers.anon]\nburst = 30\n";
    let r = rig(toml);
    for _ in 0..25 {
        assert_eq!(r.get(PEER, "/").action(), Action::Allow);
    }
    let r = restart(r, toml, true, T0 + 1_000);
    for _ in 0..5 {
        assert_eq!(r.get(PEER, "/").action(), Action::Allow);
    }
    assert_eq!(r.get(PEER, "/").reason(), Some(Reason::Burst));
}

#[test]
fn a_daily_count_survives_the_hour_and_a_past_hour_is_not_current() {
    let toml = "[tiers.anon]\nhourly = 20\n[quota]\nanon = 30\n";
    // 00:59:50, then a restart at 01:00:10: a new hour, the same day.
    let start = NEW_YEAR_MS + 3_600_000 - 10_000;
    let r = rig_in(toml, tempfile::tempdir().unwrap(), start);
    for _ in 0..15 {
        r.get(PEER, "/");
    }
    let r = restart(r, toml, true, start + 20_000);
    let d = r.get(PEER, "/");
    assert_eq!(d.action(), Action::Allow);
    assert_eq!(remaining(&d, WindowKind::Hourly), 19, "a fresh hour");
    assert_eq!(
        remaining(&d, WindowKind::Daily),
        30 - 16,
        "the day's count kept"
    );

    // And at the next UTC day nothing of it is loaded.
    let next_day = NEW_YEAR_MS + 86_400_000 + 60_000;
    let r = restart(r, toml, true, next_day);
    assert_eq!(r.engine.store().identity_count(), 0, "nothing live to load");
    assert_eq!(remaining(&r.get(PEER, "/"), WindowKind::Daily), 29);
}

#[test]
fn a_crash_loses_at_most_one_snapshot_interval() {
    let toml = "[tiers.anon]\nhourly = 100000\n[quota]\nanon = 100000\n\
                [store]\nsnapshot_interval = \"10s\"\n";
    let r = rig(toml);
    let every_ms = r.cfg.store.snapshot_interval.as_millis() as u64;
    assert_eq!(every_ms, 10_000);
    let (mut spent, mut last_snapshot_ms, mut at_snapshot) = (0u32, r.clock_now(), 0u32);
    // One request a second for 47 s; the periodic snapshot on the injected clock's schedule.
    for _ in 0..47 {
        assert_eq!(r.get(PEER, "/").action(), Action::Allow);
        spent += 1;
        r.advance_secs(1);
        if r.clock_now() - last_snapshot_ms >= every_ms {
            r.engine.store().persist_counters(r.clock_now()).unwrap();
            last_snapshot_ms = r.clock_now();
            at_snapshot = spent;
        }
    }
    let crash_ms = r.clock_now();
    // kill -9: no final snapshot.
    let r = restart(r, toml, false, crash_ms + 1_000);
    let d = r.get(PEER, "/");
    let restored = 100_000 - 1 - remaining(&d, WindowKind::Daily);
    assert_eq!(restored, at_snapshot, "what the last snapshot held");
    let lost = spent - restored;
    let requests_per_interval = (every_ms / 1000) as u32;
    assert!(
        lost > 0 && lost <= requests_per_interval,
        "lost {lost} of {spent}: at most one interval ({requests_per_interval} requests)"
    );
    assert_eq!(remaining(&d, WindowKind::Hourly), 100_000 - restored - 1);
}

#[test]
fn a_corrupt_snapshot_is_set_aside_and_the_store_opens() {
    let toml = "[tiers.anon]\nhourly = 20\n";
    let r = rig(toml);
    for _ in 0..10 {
        r.get(PEER, "/");
    }
    r.engine.store().persist_counters(r.clock_now()).unwrap();
    let path = r.dir.path().join(SNAPSHOT_FILE);
    // A torn write: the file cut short (and, below, one flipped byte).
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(bytes.len() - 7);
    std::fs::write(&path, &bytes).unwrap();
    let r = restart(r, toml, false, T0 + 1_000);
    let corrupt = r.engine.store().corrupt_files();
    assert_eq!(corrupt.len(), 1, "{corrupt:?}");
    assert_eq!(corrupt[0].file, path);
    assert!(corrupt[0].moved_to.is_file() && !path.exists());
    assert_eq!(
        remaining(&r.get(PEER, "/"), WindowKind::Hourly),
        19,
        "started without it"
    );

    r.engine.store().persist_counters(r.clock_now()).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[20] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let r = restart(r, toml, false, T0 + 2_000);
    let corrupt = r.engine.store().corrupt_files();
    assert_eq!(corrupt.len(), 1, "{corrupt:?}");
    assert!(corrupt[0].error.contains("checksum"), "{corrupt:?}");
}

#[test]
fn the_snapshot_interval_is_validated() {
    for bad in ["\"0s\"", "\"soon\"", "\"5ms\""] {
        let err = limiter_daemon::config::Config::from_toml_str(
            &format!("[store]\nsnapshot_interval = {bad}\n"),
            std::path::Path::new("t.toml"),
            &limiter_daemon::config::EnvMap::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("snapshot_interval"), "{bad}: {err}");
    }
}
