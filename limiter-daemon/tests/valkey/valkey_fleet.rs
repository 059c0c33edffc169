//! The Valkey store as a fleet uses it, against real valkey-servers this test starts on
//! loopback (standalone and a three-primary cluster): the async count, one script call per
//! decision for every kind of caller, the key layout read back with `valkey-cli`, AUTH, the
//! lockout stream between two stores, the fleet secret, and keys shared between hosts.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use limiter_daemon::config::store::ValkeyPassword;
use limiter_daemon::config::HashMode;
use limiter_daemon::engine::Tier;
use limiter_daemon::identity::hash::{IdKey, IdentityHasher, Namespace};
use limiter_daemon::model::{KeyRecord, PerWindow, WindowKind};
use limiter_daemon::store::count::{CountOutcome, CountRequest, Limit, NetCount};
use limiter_daemon::store::lockout_events::{LockoutEvent, LockoutEvents};
use limiter_daemon::store::{
    CountStore, Counting, Gate, LockCause, Lockout, RecordStore, StrikeRecord,
};
use limiter_daemon::valkey::{ValkeyOptions, ValkeyStore, SECRET_FILE};
use limiter_tests::free_port;
use limiter_tests::valkey::cli_run;
use limiter_tests::valkey::client_commands_during;
use limiter_tests::valkey::cluster as start_cluster;
use limiter_tests::valkey::commandstats;
use limiter_tests::valkey::reset_stats;
use limiter_tests::valkey::{start, start_on, start_with};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn limits(hourly: u32) -> PerWindow<Option<Limit>> {
    PerWindow::default()
        .with(WindowKind::Burst, Some(Limit::refusing(1000)))
        .with(WindowKind::Hourly, Some(Limit::refusing(hourly)))
        .with(WindowKind::Daily, Some(Limit::refusing(5000)))
}

fn req(id: IdKey, now_ms: u64, hourly: u32) -> CountRequest {
    CountRequest {
        networks: Default::default(),
        id,
        now_ms,
        cost: 1,
        limits: limits(hourly),
    }
}

async fn count_async(store: &ValkeyStore, r: &CountRequest) -> CountOutcome {
    let ip: IpAddr = "192.0.2.1".parse().unwrap();
    match store.gate_and_count_async(ip, r) {
        Counting::Pending(f) => match f.await.unwrap() {
            Gate::Counted(o) => o,
            Gate::Locked(l) => panic!("the count script never answers locked: {l:?}"),
        },
        Counting::Ready(r) => panic!("a remote store awaits: {r:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_count_answers_as_the_sync_one() {
    let Some(server) = start() else { return };
    let store = ValkeyStore::open(&server.addr, "as:", HashMode::Hmac, None).unwrap();
    let h = store.hasher();
    let (a, b) = (h.id(Namespace::Ip, b"a"), h.id(Namespace::Ip, b"b"));
    let t = 1_767_225_600_000 + 3_599_000; // a second before an hour ends
    for step in 0..40u64 {
        let now = t + step * 100;
        let store_ref = &store;
        let sync =
            tokio::task::block_in_place(|| store_ref.check_and_count(&req(a, now, 25)).unwrap());
        let asy = count_async(&store, &req(b, now, 25)).await;
        assert_eq!(asy, sync, "step {step}");
    }
}

async fn no_more_than_the_limit(store: Arc<ValkeyStore>) {
    let id = store.hasher().id(Namespace::Ip, b"crowd");
    let now = now_ms();
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let s = store.clone();
            tokio::spawn(async move { count_async(&s, &req(id, now, 20)).await.admitted })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += usize::from(t.await.unwrap());
    }
    assert_eq!(admitted, 20, "64 at once, limit 20");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_tasks_at_once_never_pass_the_limit_standalone_and_cluster() {
    let Some(server) = start() else { return };
    let s = tokio::task::block_in_place(|| {
        ValkeyStore::open(&server.addr, "c64:", HashMode::Hmac, None).unwrap()
    });
    no_more_than_the_limit(Arc::new(s)).await;
    let Some(nodes) = start_cluster() else { return };
    let s = tokio::task::block_in_place(|| {
        ValkeyStore::open(&nodes[0].addr, "c64:", HashMode::Hmac, None).unwrap()
    });
    no_more_than_the_limit(Arc::new(s)).await;
}

/// One count per decision for address, token and key holders on `addrs`: plain commands only,
/// one HGETALL of the burst among them (that they go in one round trip is
/// `a_caller_and_its_networks_are_counted_in_one_round_trip`'s).
fn one_count_per_decision(addrs: &[&str]) {
    let store = Arc::new(ValkeyStore::open_with(ValkeyOptions::new(addrs[0], "rt:")).unwrap());
    let h = store.hasher();
    let ids = [
        h.id(Namespace::Ip, b"198.51.100.7"),
        h.id(Namespace::Token, b"jti-7"),
        h.id(Namespace::Key, b"ab12cd34"),
    ];
    let rt = tokio::runtime::Runtime::new().unwrap();
    let now = now_ms();
    // Warm: the cluster client's first call to each node opens its connection.
    rt.block_on(async {
        for id in ids {
            count_async(&store, &req(id, now, 1000)).await;
        }
    });
    reset_stats(addrs);
    let lines = client_commands_during(addrs, || {
        rt.block_on(async {
            for _ in 0..10 {
                for id in ids {
                    count_async(&store, &req(id, now, 1000)).await;
                }
            }
        })
    });
    let stats = commandstats(addrs);
    assert!(
        lines.iter().all(|l| !l.contains("\"EVALSHA\"")),
        "{lines:#?}"
    );
    assert_eq!(stats.get("hgetall"), Some(&30), "{stats:?}");
    // HINCRBY, PEXPIRE, HGETALL; GET and SET of `:ts`; INCRBY and PEXPIRE per fixed window.
    assert!(
        lines.len() <= 30 * 9,
        "{} commands: {lines:#?}",
        lines.len()
    );
}

#[test]
fn one_count_per_decision_for_every_kind_of_caller_standalone_and_cluster() {
    let Some(server) = start() else { return };
    one_count_per_decision(&[&server.addr]);
    let Some(nodes) = start_cluster() else { return };
    let addrs: Vec<&str> = nodes.iter().map(|n| n.addr.as_str()).collect();
    one_count_per_decision(&addrs);
}

#[test]
fn the_key_layout_on_the_server() {
    let Some(server) = start() else { return };
    let store = ValkeyStore::open(&server.addr, "lay:", HashMode::Sha256, None).unwrap();
    let ip = "203.0.113.9";
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("printf %s {ip} | sha256sum")])
        .output()
        .unwrap();
    let hex = String::from_utf8(out.stdout).unwrap()[..64].to_string();
    let id = store.hasher().ip_id(ip.parse().unwrap());
    let now = now_ms();
    let mut r = req(id, now, 100);
    r.limits = r
        .limits
        .with(WindowKind::KeyHourly, Some(Limit::refusing(50)));
    store.check_and_count(&r).unwrap();
    store.check_and_count(&r).unwrap();

    let hour = now / 3_600_000;
    let base = format!("lay:quota:{{ip:{hex}}}");
    let mut keys: Vec<String> = cli_run(&server.addr, &["--scan", "--pattern", "lay:quota:*"])
        .lines()
        .map(str::to_string)
        .collect();
    keys.sort();
    let mut want = vec![
        base.clone(),
        format!("{base}:burst"),
        format!("{base}:h:{hour}"),
        format!("{base}:kh:{hour}"),
        format!("{base}:ts"),
    ];
    want.sort();
    assert_eq!(keys, want);
    assert_eq!(
        cli_run(&server.addr, &["GET", &base]).trim(),
        "2",
        "the daily count"
    );
    // TTLs: the daily count and :ts past the UTC day end (by at most a minute), the hour's
    // past the hour's end.
    let day_end_s = (now / 86_400_000 + 1) * 86_400 - now / 1000;
    for k in [&base, &format!("{base}:ts")] {
        let ttl: u64 = cli_run(&server.addr, &["TTL", k]).trim().parse().unwrap();
        assert!(
            ttl >= day_end_s.saturating_sub(2) && ttl <= day_end_s + 61,
            "{k}: {ttl} vs {day_end_s}"
        );
    }
    let hour_ttl: u64 = cli_run(&server.addr, &["TTL", &format!("{base}:h:{hour}")])
        .trim()
        .parse()
        .unwrap();
    assert!(hour_ttl <= 3_600 + 61 && hour_ttl > 60, "{hour_ttl}");
    // :ts: the first count's time, ISO 8601 (not moved by the second count).
    let ts = cli_run(&server.addr, &["GET", &format!("{base}:ts")]);
    let iso = limiter_daemon::valkey::script::iso8601(now);
    assert_eq!(ts.trim(), iso);
    assert!(ts.trim().ends_with('Z') && ts.contains('T'), "{ts}");

    // The next UTC day starts the daily count over and moves :ts.
    let tomorrow = (now / 86_400_000 + 1) * 86_400_000 + 5_000;
    store.check_and_count(&req(id, tomorrow, 100)).unwrap();
    assert_eq!(cli_run(&server.addr, &["GET", &base]).trim(), "1");
    assert_eq!(
        cli_run(&server.addr, &["GET", &format!("{base}:ts")]).trim(),
        limiter_daemon::valkey::script::iso8601(tomorrow)
    );
    assert_eq!(
        store.usage(&id, tomorrow).unwrap().unwrap().used[WindowKind::Daily],
        1
    );

    // Lockouts and strikes under the same tag; keys as hashes.
    let l = Lockout {
        ip: ip.parse().unwrap(),
        since_ms: now,
        until_ms: now + 60_000,
        level: 1,
        cause: LockCause::Burst,
        reason: None,
    };
    let s = StrikeRecord {
        strikes: 1,
        last_strike_ms: now,
        quiet_from_ms: now + 60_000,
    };
    store.put_lockout(l, Some(s)).unwrap();
    let all = cli_run(&server.addr, &["--scan", "--pattern", "lay:*"]);
    assert!(all.contains(&format!("lay:lockout:{{ip:{hex}}}")), "{all}");
    assert!(all.contains(&format!("lay:strikes:{{ip:{hex}}}")), "{all}");
    assert!(all.contains("lay:lockouts"), "the stream: {all}");
    store.put_key(key_record("ab12cd34")).unwrap();
    let fields = cli_run(&server.addr, &["HGETALL", "lay:key:ab12cd34"]);
    assert!(
        fields.contains("secret_hash") && fields.contains("tier"),
        "{fields}"
    );
}

fn key_record(id: &str) -> KeyRecord {
    KeyRecord {
        id: id.into(),
        secret_hash: "00".repeat(32),
        tier: Tier::Sponsor,
        hourly_limit: 100,
        owner: Some("acme".into()),
        note: None,
        created_ms: 1,
        revoked_ms: None,
    }
}

#[test]
fn a_wrong_password_is_a_clear_error_naming_the_setting() {
    let Some(server) = start_with(free_port(), &["--requirepass", "right-horse-battery"]) else {
        return;
    };
    let with = |pw: Option<&str>| {
        let mut o = ValkeyOptions::new(&server.addr, "auth:");
        o.password = pw.map(|p| ValkeyPassword {
            value: p.into(),
            setting: "store.valkey_password_file",
            file: None,
        });
        ValkeyStore::open_with(o)
    };
    let e = with(Some("wrong")).err().unwrap().to_string();
    assert!(
        e.contains("store.valkey_password_file") && e.contains("WRONGPASS"),
        "{e}"
    );
    assert!(
        !e.contains("wrong\""),
        "the password is never in the message: {e}"
    );
    let e = with(None).err().unwrap().to_string();
    assert!(
        e.contains("NOAUTH") && e.contains("store.valkey_password_file"),
        "{e}"
    );
    let ok = with(Some("right-horse-battery")).unwrap();
    ok.put_key(key_record("aa11bb22")).unwrap();
    assert!(ok.key("aa11bb22").unwrap().is_some());

    // An ACL user: `valkey_username` with its own password.
    cli_run(
        &server.addr,
        &[
            "-a",
            "right-horse-battery",
            "--no-auth-warning",
            "ACL",
            "SETUSER",
            "fleet",
            "on",
            ">fleet-pw",
            "~*",
            "+@all",
        ],
    );
    let as_user = |pw: &str| {
        let mut o = ValkeyOptions::new(&server.addr, "auth:");
        o.username = Some("fleet".into());
        o.password = Some(ValkeyPassword {
            value: pw.into(),
            setting: "LIMITER_VALKEY_PASSWORD",
            file: None,
        });
        ValkeyStore::open_with(o)
    };
    assert!(as_user("fleet-pw")
        .unwrap()
        .key("aa11bb22")
        .unwrap()
        .is_some());
    let e = as_user("nope").err().unwrap().to_string();
    assert!(
        e.contains("LIMITER_VALKEY_PASSWORD") && e.contains("WRONGPASS"),
        "{e}"
    );
}

#[test]
fn construction_needs_no_server_and_connect_switches_over() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let mut o = ValkeyOptions::new(&addr, "late:");
    o.secret_file = Some(dir.path().join(SECRET_FILE));
    let started = Instant::now();
    let store = ValkeyStore::new(o).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        dir.path().join(SECRET_FILE).exists(),
        "a secret made locally when Valkey is down"
    );
    let e = store.key("x").unwrap_err().to_string();
    assert!(e.contains("not connected"), "{e}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert!(rt.block_on(store.connect()).is_err());
    let Some(server) = start_on(port) else { return };
    rt.block_on(store.connect()).unwrap();
    store.put_key(key_record("cc33dd44")).unwrap();
    // The local secret went into the empty Valkey.
    let local = std::fs::read_to_string(dir.path().join(SECRET_FILE)).unwrap();
    assert_eq!(
        cli_run(&server.addr, &["GET", "late:hash-secret"]).trim(),
        local.trim()
    );
}

/// Everything this test binary logs (JSON lines), from every thread (the store logs on its own).
fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = buf.clone();
        tracing_subscriber::fmt()
            .json()
            .with_writer(move || Capture(writer.clone()))
            .init();
        buf
    })
    .clone()
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_fleet_secret_is_kept_locally_and_a_mismatch_is_counted() {
    let logs = captured_logs();
    let Some(server) = start() else { return };
    let opts = |dir: &std::path::Path| {
        let mut o = ValkeyOptions::new(&server.addr, "sec:");
        o.secret_file = Some(dir.join(SECRET_FILE));
        o
    };
    // Empty Valkey, local secret present: Valkey gets the local one.
    let a = tempfile::tempdir().unwrap();
    let local = "11".repeat(32);
    std::fs::write(a.path().join(SECRET_FILE), &local).unwrap();
    let sa = ValkeyStore::open_with(opts(a.path())).unwrap();
    assert_eq!(
        cli_run(&server.addr, &["GET", "sec:hash-secret"]).trim(),
        local
    );
    assert_eq!(sa.secret_mismatches(), 0);
    // Valkey present, no local one: adopted and saved.
    let b = tempfile::tempdir().unwrap();
    let sb = ValkeyStore::open_with(opts(b.path())).unwrap();
    assert_eq!(
        std::fs::read_to_string(b.path().join(SECRET_FILE)).unwrap(),
        local
    );
    let h = IdentityHasher::hmac(&hex::decode(&local).unwrap());
    assert_eq!(
        sb.hasher().id(Namespace::Ip, b"x"),
        h.id(Namespace::Ip, b"x")
    );
    // Both present and different: counted, and this host keeps its own.
    let c = tempfile::tempdir().unwrap();
    let other = "22".repeat(32);
    std::fs::write(c.path().join(SECRET_FILE), &other).unwrap();
    let sc = ValkeyStore::open_with(opts(c.path())).unwrap();
    assert_eq!(sc.secret_mismatches(), 1);
    let text = String::from_utf8(logs.lock().clone()).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("hash_secret_mismatch"))
        .unwrap_or_else(|| panic!("logged: {text}"));
    assert!(line.contains("\"level\":\"ERROR\""), "{line}");
    assert!(
        !line.contains(&local) && !line.contains(&other),
        "never the secrets: {line}"
    );
    let h2 = IdentityHasher::hmac(&hex::decode(&other).unwrap());
    assert_eq!(
        sc.hasher().id(Namespace::Ip, b"x"),
        h2.id(Namespace::Ip, b"x")
    );
    assert_eq!(
        cli_run(&server.addr, &["GET", "sec:hash-secret"]).trim(),
        local,
        "Valkey's kept"
    );
}

#[test]
fn a_key_issued_or_revoked_on_one_host_reads_back_on_another() {
    let Some(server) = start() else { return };
    let a = ValkeyStore::open(&server.addr, "k2:", HashMode::Hmac, None).unwrap();
    let b = ValkeyStore::open(&server.addr, "k2:", HashMode::Hmac, None).unwrap();
    a.put_key(key_record("ee55ff66")).unwrap();
    assert_eq!(b.key("ee55ff66").unwrap(), Some(key_record("ee55ff66")));
    let mut revoked = key_record("ee55ff66");
    revoked.revoked_ms = Some(99);
    a.put_key(revoked.clone()).unwrap();
    assert_eq!(b.key("ee55ff66").unwrap(), Some(revoked.clone()));
    assert_eq!(b.keys().unwrap(), vec![revoked]);
}

/// What a reload hands the sink.
type Active = Vec<(Lockout, Option<StrikeRecord>)>;

/// A follower's sink that records what it was given.
#[derive(Default)]
struct Seen {
    applied: Mutex<Vec<LockoutEvent>>,
    reloads: Mutex<Vec<Active>>,
}

impl LockoutEvents for Seen {
    fn apply(&self, event: &LockoutEvent) {
        self.applied.lock().push(event.clone());
    }
    fn reload(&self, active: Active) {
        self.reloads.lock().push(active);
    }
}

fn poll<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    limiter_tests::poll(Duration::from_secs(15), what, &mut f)
}

fn lockout(ip: &str, now: u64, secs: u64) -> Lockout {
    Lockout {
        ip: ip.parse().unwrap(),
        since_ms: now,
        until_ms: now + secs * 1000,
        level: 1,
        cause: LockCause::Burst,
        reason: None,
    }
}

#[test]
fn the_stream_carries_lockouts_between_stores_and_survives_restarts_and_gaps() {
    let Some(server) = start() else { return };
    let port: u16 = server.addr.rsplit(':').next().unwrap().parse().unwrap();
    let a = ValkeyStore::open(&server.addr, "st:", HashMode::Hmac, None).unwrap();
    let b = ValkeyStore::open(&server.addr, "st:", HashMode::Hmac, None).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let now = now_ms();
    // Made before B follows: B's start reloads it.
    rt.block_on(a.put_lockout_async(&lockout("192.0.2.1", now, 600), None, "host-a"))
        .unwrap();
    let seen = Arc::new(Seen::default());
    let cancel = CancellationToken::new();
    let _follower = b.follow(seen.clone(), cancel.clone());
    poll("the reload at start", || {
        let r = seen.reloads.lock();
        (r.len() == 1 && r[0].len() == 1 && r[0][0].0.ip == "192.0.2.1".parse::<IpAddr>().unwrap())
            .then_some(())
    });
    // Published by A, applied by B.
    let strikes = StrikeRecord {
        strikes: 2,
        last_strike_ms: now,
        quiet_from_ms: now + 60_000,
    };
    let started = Instant::now();
    let made = rt
        .block_on(a.put_lockout_async(&lockout("192.0.2.2", now, 60), Some(&strikes), "host-a"))
        .unwrap();
    poll("B applies A's lockout", || {
        seen.applied.lock().iter().any(|e| matches!(e, LockoutEvent::Locked { lockout, strikes: Some(s), host } if *lockout == made && s.strikes == 2 && host == "host-a")).then_some(())
    });
    println!("stream propagation: {:?}", started.elapsed());
    // The longer lockout wins: a shorter one written late keeps the longer in force.
    let kept = rt
        .block_on(a.put_lockout_async(&lockout("192.0.2.2", now, 5), None, "host-a"))
        .unwrap();
    assert_eq!(kept, made);
    rt.block_on(a.remove_lockout_async("192.0.2.2".parse().unwrap(), "host-a"))
        .unwrap();
    poll("B applies the lift", || {
        seen.applied.lock().iter().any(|e| matches!(e, LockoutEvent::Lifted { ip, .. } if *ip == "192.0.2.2".parse::<IpAddr>().unwrap())).then_some(())
    });
    rt.block_on(a.publish(&LockoutEvent::NetLocked {
        net: "198.51.100.0/24".parse().unwrap(),
        until_ms: now + 1000,
        reason: "scan".into(),
        host: "host-a".into(),
    }))
    .unwrap();
    poll("B applies a net event", || {
        seen.applied
            .lock()
            .iter()
            .any(|e| matches!(e, LockoutEvent::NetLocked { .. }))
            .then_some(())
    });

    // A lost connection without a gap: B resumes from its last ID, no reload.
    let reloads = seen.reloads.lock().len();
    cli_run(&server.addr, &["CLIENT", "KILL", "TYPE", "normal"]);
    let resumed = lockout("192.0.2.5", now, 600);
    poll("A writes after the kill", || {
        rt.block_on(a.put_lockout_async(&resumed, None, "host-a"))
            .ok()
    });
    poll("B resumes and applies it", || {
        seen.applied
            .lock()
            .iter()
            .any(|e| matches!(e, LockoutEvent::Locked { lockout, .. } if *lockout == resumed))
            .then_some(())
    });
    assert_eq!(seen.reloads.lock().len(), reloads, "resumed, not reloaded");

    // A gap: the stream trimmed while B is away, and a lockout it never saw an event for.
    let hasher = a.hasher();
    let gone = lockout("192.0.2.3", now, 600);
    let key = a.layout().lockout(&hasher.ip_id(gone.ip));
    cli_run(&server.addr, &["XTRIM", "st:lockouts", "MAXLEN", "0"]);
    cli_run(
        &server.addr,
        &[
            "SET",
            &key,
            &serde_json::to_string(&gone).unwrap(),
            "PX",
            "600000",
        ],
    );
    cli_run(&server.addr, &["CLIENT", "KILL", "TYPE", "normal"]);
    poll("B reloads after the gap", || {
        let r = seen.reloads.lock();
        (r.len() >= 2 && r.last().unwrap().iter().any(|(l, _)| *l == gone)).then_some(())
    });

    // The server restarts (empty): B reconnects and sees what A makes next.
    drop(server);
    let Some(_again) = start_on(port) else { return };
    let after = lockout("192.0.2.4", now, 600);
    poll("A writes again after the restart", || {
        rt.block_on(a.put_lockout_async(&after, None, "host-a"))
            .ok()
    });
    poll("B has the lockout made after the restart", || {
        let applied = seen
            .applied
            .lock()
            .iter()
            .any(|e| matches!(e, LockoutEvent::Locked { lockout, .. } if *lockout == after));
        let reloaded = seen
            .reloads
            .lock()
            .last()
            .is_some_and(|r| r.iter().any(|(l, _)| *l == after));
        (applied || reloaded).then_some(())
    });
    cancel.cancel();
}

/// What a [`Gate`]d relay has seen since it was armed.
#[derive(Default)]
struct GateState {
    armed: bool,
    /// `EVALSHA` commands that went towards the server since arming.
    sent: usize,
    /// A reply had to be let through at the deadline: the scripts never were all in flight.
    gave_up: bool,
}

/// A TCP relay to `upstream` that, once armed, holds every reply until `want` counts (each
/// marked by `marker`: a script call's EVALSHA, or a count pipeline's one HGETALL) have gone
/// towards the server (or a deadline passes, which it records). Calls sent at once are all in
/// flight before any reply returns; a call sent only after another's reply can never be, so
/// the relay gives up waiting for it. No timing is measured.
struct ScriptGate {
    addr: String,
    state: Arc<(parking_lot::Mutex<GateState>, parking_lot::Condvar)>,
}

impl ScriptGate {
    fn start(upstream: &str, want: usize, marker: &'static [u8]) -> ScriptGate {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let state = Arc::new((
            parking_lot::Mutex::new(GateState::default()),
            parking_lot::Condvar::new(),
        ));
        let upstream = upstream.to_string();
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let server = std::net::TcpStream::connect(&upstream).unwrap();
                let (mut c_read, mut s_write) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (mut s_read, mut c_write) = (server, client);
                let up = Arc::clone(&shared);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n @ 1..) = c_read.read(&mut buf) {
                        let scripts = buf[..n]
                            .windows(marker.len())
                            .filter(|w| *w == marker)
                            .count();
                        if s_write.write_all(&buf[..n]).is_err() {
                            break;
                        }
                        let (m, cv) = &*up;
                        let mut g = m.lock();
                        if g.armed {
                            g.sent += scripts;
                            cv.notify_all();
                        }
                    }
                });
                let down = Arc::clone(&shared);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n @ 1..) = s_read.read(&mut buf) {
                        {
                            let (m, cv) = &*down;
                            let mut g = m.lock();
                            let deadline = Instant::now() + Duration::from_secs(3);
                            while g.armed && g.sent < want {
                                if cv.wait_until(&mut g, deadline).timed_out() {
                                    g.gave_up = true;
                                    break;
                                }
                            }
                        }
                        if c_write.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        ScriptGate { addr, state }
    }

    fn arm(&self) {
        *self.state.0.lock() = GateState {
            armed: true,
            ..GateState::default()
        };
    }

    /// `(scripts sent while armed, whether a reply had to be let through before they all were)`.
    fn seen(&self) -> (usize, bool) {
        let g = self.state.0.lock();
        (g.sent, g.gave_up)
    }
}

#[test]
fn a_caller_and_its_networks_are_counted_in_one_round_trip() {
    let Some(server) = start() else { return };
    let gate = ScriptGate::start(&server.addr, 3, b"HGETALL");
    let store = ValkeyStore::open_with(ValkeyOptions::new(&gate.addr, "nets:")).unwrap();
    let h = store.hasher();
    let net = |id| NetCount {
        id,
        limits: PerWindow::default()
            .with(WindowKind::Burst, Some(Limit::refusing(1000)))
            .with(WindowKind::Hourly, Some(Limit::refusing(1000))),
    };
    let r = CountRequest {
        networks: [
            Some(net(h.id(Namespace::Net, b"198.51.100.0/24"))),
            Some(net(h.id(Namespace::Asn, b"AS64500"))),
        ],
        ..req(h.id(Namespace::Ip, b"198.51.100.7"), now_ms(), 1000)
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Warm: the connection and the scripts loaded, with the relay passing everything.
    rt.block_on(count_async(&store, &r));
    gate.arm();
    let o = rt.block_on(count_async(&store, &r));
    assert!(o.admitted);
    assert!(o.networks.iter().all(Option::is_some), "{o:?}");
    let (sent, gave_up) = gate.seen();
    assert_eq!(sent, 3, "the caller's count and two networks'");
    assert!(
        !gave_up,
        "all three counts were in flight before the first reply: one round trip"
    );
}

/// Connections the server has accepted since it started.
fn connections_received(addr: &str) -> u64 {
    cli_run(addr, &["INFO", "stats"])
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

#[test]
fn one_unreadable_record_is_skipped_counted_listed_and_deletable_and_takes_nothing_with_it() {
    use limiter_daemon::model::{ListEntry, ListKind};
    use limiter_daemon::store::unreadable::RecordKind;
    let Some(server) = start() else { return };
    let s = ValkeyStore::open(&server.addr, "bad:", HashMode::Hmac, None).unwrap();
    let now = now_ms();
    let deny = |net: &str| ListEntry {
        net: net.parse().unwrap(),
        until_ms: None,
        comment: "abuse".into(),
    };
    s.put_list_entry(ListKind::Deny, deny("198.51.100.0/24"))
        .unwrap();
    s.put_key(key_record("aa11bb22")).unwrap();
    s.put_lockout(lockout("192.0.2.40", now, 600), None)
        .unwrap();
    // What an operator's typo or another program leaves: not JSON, out of bounds, half a key.
    let too_long = serde_json::json!({"net": "203.0.113.0/24", "comment": "x".repeat(300)});
    cli_run(
        &server.addr,
        &["HSET", "bad:list:deny", "garbage", "not json"],
    );
    cli_run(
        &server.addr,
        &[
            "HSET",
            "bad:list:deny",
            "203.0.113.0/24",
            &too_long.to_string(),
        ],
    );
    cli_run(
        &server.addr,
        &["HSET", "bad:key:deadbeef", "id", "deadbeef"],
    );
    let bad_lockout = format!("bad:lockout:{{ip:{}}}", "f".repeat(64));
    cli_run(&server.addr, &["SET", &bad_lockout, "not json"]);
    let mut forever = lockout("192.0.2.41", now, 600);
    forever.until_ms = u64::MAX;
    let forever_key = s.layout().lockout(&s.hasher().ip_id(forever.ip));
    cli_run(
        &server.addr,
        &[
            "SET",
            &forever_key,
            &serde_json::to_string(&forever).unwrap(),
        ],
    );

    // Everything else reads as before.
    assert_eq!(
        s.list(ListKind::Deny).unwrap(),
        vec![deny("198.51.100.0/24")]
    );
    assert_eq!(s.keys().unwrap(), vec![key_record("aa11bb22")]);
    assert_eq!(
        s.key("deadbeef").unwrap(),
        None,
        "an unreadable key never authenticates"
    );
    let held: Vec<IpAddr> = s.lockouts(now).unwrap().iter().map(|l| l.ip).collect();
    assert_eq!(held, vec!["192.0.2.40".parse::<IpAddr>().unwrap()]);
    assert_eq!(
        s.lockout(forever.ip).unwrap(),
        None,
        "out of bounds reads as none"
    );

    // Listed by raw field or key, with why, never the value.
    let bad = s.unreadable(RecordKind::List(ListKind::Deny)).unwrap();
    let fields: Vec<_> = bad.iter().map(|r| r.field.clone().unwrap()).collect();
    assert_eq!(fields, vec!["203.0.113.0/24", "garbage"], "{bad:?}");
    assert!(bad
        .iter()
        .all(|r| r.key == "bad:list:deny" && !r.error.contains("not json")));
    assert!(bad[0].error.contains("200 bytes"), "{bad:?}");
    let keys = s.unreadable(RecordKind::Key).unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(keys[0].id.as_deref(), Some("deadbeef"));
    let locks = s.unreadable(RecordKind::Lockout).unwrap();
    let mut names: Vec<_> = locks.iter().map(|r| r.key.clone()).collect();
    names.sort();
    let mut want = vec![bad_lockout.clone(), forever_key.clone()];
    want.sort();
    assert_eq!(names, want);

    // Counted once each, however often they are read.
    s.list(ListKind::Deny).unwrap();
    let counts = s.unreadable_counts();
    for (kind, n) in [("list_deny", 2), ("key", 1), ("lockout", 2)] {
        assert!(counts.contains(&(kind, n)), "{kind}: {counts:?}");
    }

    // Deleted by raw name; a readable record is never deleted this way.
    assert!(!s
        .remove_unreadable(RecordKind::List(ListKind::Deny), "198.51.100.0/24")
        .unwrap());
    assert!(s
        .remove_unreadable(RecordKind::List(ListKind::Deny), "garbage")
        .unwrap());
    assert!(!s
        .remove_unreadable(RecordKind::List(ListKind::Deny), "garbage")
        .unwrap());
    assert!(!s.remove_unreadable(RecordKind::Key, "aa11bb22").unwrap());
    assert!(s.remove_unreadable(RecordKind::Key, "deadbeef").unwrap());
    assert!(s
        .remove_unreadable(RecordKind::Lockout, &bad_lockout)
        .unwrap());
    assert_eq!(s.unreadable(RecordKind::Key).unwrap(), vec![]);
    assert_eq!(
        s.unreadable(RecordKind::List(ListKind::Deny))
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        s.list(ListKind::Deny).unwrap(),
        vec![deny("198.51.100.0/24")]
    );
    assert_eq!(s.keys().unwrap(), vec![key_record("aa11bb22")]);
}

#[test]
fn the_follower_skips_unreadable_lockouts_and_entries_and_backs_off_while_it_cannot_follow() {
    let Some(server) = start() else { return };
    let a = ValkeyStore::open(&server.addr, "sk:", HashMode::Hmac, None).unwrap();
    let b = ValkeyStore::open(&server.addr, "sk:", HashMode::Hmac, None).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let now = now_ms();
    rt.block_on(a.put_lockout_async(&lockout("192.0.2.1", now, 600), None, "host-a"))
        .unwrap();
    // One lockout record that does not parse, and the stream gone: B must reload.
    let junk = format!("sk:lockout:{{ip:{}}}", "e".repeat(64));
    cli_run(&server.addr, &["SET", &junk, "not json"]);
    cli_run(&server.addr, &["DEL", "sk:lockouts"]);
    let seen = Arc::new(Seen::default());
    let cancel = CancellationToken::new();
    let _follower = b.follow(seen.clone(), cancel.clone());
    poll("the reload at start, without the unreadable record", || {
        let r = seen.reloads.lock();
        (r.len() == 1 && r[0].len() == 1 && r[0][0].0.ip == "192.0.2.1".parse::<IpAddr>().unwrap())
            .then_some(())
    });
    assert!(b.unreadable_counts().contains(&("lockout", 1)));

    // Entries that do not parse or are out of bounds are skipped; the next one applies.
    let mut forever = lockout("192.0.2.2", now, 60);
    forever.until_ms = u64::MAX;
    let mut wordy = lockout("192.0.2.3", now, 60);
    wordy.reason = Some("x".repeat(100_000));
    let bodies = [
        "not json".to_string(),
        serde_json::to_string(&LockoutEvent::Locked {
            lockout: forever,
            strikes: None,
            host: "host-x".into(),
        })
        .unwrap(),
        serde_json::to_string(&LockoutEvent::Locked {
            lockout: wordy,
            strikes: None,
            host: "host-x".into(),
        })
        .unwrap(),
    ];
    for body in &bodies {
        cli_run(&server.addr, &["XADD", "sk:lockouts", "*", "event", body]);
    }
    let good = rt
        .block_on(a.put_lockout_async(&lockout("192.0.2.4", now, 60), None, "host-a"))
        .unwrap();
    poll("the entry after the bad ones applies", || {
        seen.applied
            .lock()
            .iter()
            .any(|e| matches!(e, LockoutEvent::Locked { lockout, .. } if *lockout == good))
            .then_some(())
    });
    assert_eq!(seen.applied.lock().len(), 1, "the bad entries were skipped");
    assert!(
        b.unreadable_counts().contains(&("stream", 3)),
        "{:?}",
        b.unreadable_counts()
    );
    assert_eq!(b.follower_error(), None);

    // A stream it cannot read at all: the follower says so and backs off.
    cli_run(&server.addr, &["DEL", "sk:lockouts"]);
    cli_run(&server.addr, &["SET", "sk:lockouts", "not a stream"]);
    let why = poll("the follower to say it is not following", || {
        b.follower_error()
    });
    assert!(why.contains("WRONGTYPE"), "{why}");
    let before = connections_received(&server.addr);
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(2) {
        std::thread::park_timeout(Duration::from_millis(100));
    }
    let reconnects = connections_received(&server.addr) - before;
    println!("follower reconnects in 2 s while failing: {reconnects}");
    assert!(
        reconnects <= 6,
        "{reconnects} reconnects in 2 s: no backoff"
    );
    cli_run(&server.addr, &["DEL", "sk:lockouts"]);
    poll("following again", || {
        b.follower_error().is_none().then_some(())
    });
}
