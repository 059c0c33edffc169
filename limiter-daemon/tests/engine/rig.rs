//! Shared rig for the engine tests: a real embedded store in a temporary state directory, a
//! manual clock, a sink that records what reached "the kernel", and key lookups that land only
//! when the test says so.

#![allow(
    dead_code,
    reason = "each engine_* test crate uses a different part of this shared rig"
)]

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;
use ipnet::IpNet;
use limiter_daemon::clock::{Clock, ManualClock};
use limiter_daemon::config::store::StoreBackend;
use limiter_daemon::config::{Config, EnvMap};
use limiter_daemon::embedded::EmbeddedStore;
use limiter_daemon::engine::decider::Decider;
use limiter_daemon::engine::sink::EnforcementSink;
use limiter_daemon::engine::{
    Action, Decision, Engine, EngineOptions, KeyRefresh, Reason, RequestView, Tier, WindowKind,
};
use limiter_daemon::identity::client_ip::Client;
use limiter_daemon::model::ListKind;
use limiter_daemon::store::Store;
use parking_lot::Mutex;

/// 2026-01-01T00:00:00Z.
pub const NEW_YEAR_MS: u64 = 1_767_225_600_000;
/// A start time safely inside a UTC hour and day: 2026-01-01T00:10:00Z.
pub const T0: u64 = NEW_YEAR_MS + 10 * 60_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkEvent {
    Lock {
        ip: IpAddr,
        secs: u64,
        level: u32,
    },
    Unlock {
        ip: IpAddr,
    },
    SetTier {
        ip: IpAddr,
        tier: Tier,
    },
    /// `secs`: what the entry had left (`None`: no expiry).
    ListAdd {
        kind: ListKind,
        net: IpNet,
        secs: Option<u64>,
    },
    ListRemove {
        kind: ListKind,
        net: IpNet,
    },
}

#[derive(Default)]
pub struct RecordingSink(pub Mutex<Vec<SinkEvent>>);

impl RecordingSink {
    pub fn events(&self) -> Vec<SinkEvent> {
        self.0.lock().clone()
    }
    pub fn locks(&self) -> Vec<(u64, u32)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                SinkEvent::Lock { secs, level, .. } => Some((secs, level)),
                _ => None,
            })
            .collect()
    }
}

impl EnforcementSink for RecordingSink {
    fn lock(&self, ip: IpAddr, duration: Duration, level: u32) {
        self.0.lock().push(SinkEvent::Lock {
            ip,
            secs: duration.as_secs(),
            level,
        });
    }
    fn unlock(&self, ip: IpAddr) {
        self.0.lock().push(SinkEvent::Unlock { ip });
    }
    fn set_tier(&self, ip: IpAddr, tier: Tier) {
        self.0.lock().push(SinkEvent::SetTier { ip, tier });
    }
    fn list_add(&self, kind: ListKind, net: IpNet, ttl: Option<Duration>) {
        self.0.lock().push(SinkEvent::ListAdd {
            kind,
            net,
            secs: ttl.map(|d| d.as_secs()),
        });
    }
    fn list_remove(&self, kind: ListKind, net: IpNet) {
        self.0.lock().push(SinkEvent::ListRemove { kind, net });
    }
}

/// Burst-rejects `peer` on `engine` (every request at the same instant), then checks that the
/// `Retry-After` is the truth: the burst window's own reset (its 5 s slots free capacity 60–65 s
/// after use), one second less finds the caller still locked (and not struck again), exactly
/// that long is admitted. Shared by the embedded and Valkey stores.
pub fn burst_retry_after_is_the_truth(engine: &Engine, clock: &ManualClock, peer: &str) {
    let headers = HeaderMap::new();
    let decide = || {
        engine.decide(&RequestView {
            client: Client::Addr(ip(peer)),
            method: &http::Method::GET,
            path: "/",
            headers: &headers,
        })
    };
    let rejected = (0..10_000)
        .map(|_| decide())
        .find(|d| d.action() == Action::Reject)
        .expect("the burst refuses within 10 000 requests");
    assert_eq!(rejected.reason(), Some(Reason::Burst), "{rejected:?}");
    assert_eq!(rejected.lockout_level, Some(1));
    let burst = rejected
        .windows
        .iter()
        .find(|w| w.kind == WindowKind::Burst)
        .expect("the burst window is reported");
    let retry = rejected
        .retry_after_secs()
        .expect("a reject says when to retry");
    assert!(retry > 60, "the slots free capacity after 60 s: {retry}");
    assert_eq!(
        retry, burst.reset_secs,
        "Retry-After = the burst window's reset"
    );

    clock.advance_ms((retry - 1) * 1000);
    let d = decide();
    assert_eq!(
        (
            d.action(),
            d.reason(),
            d.retry_after_secs(),
            d.lockout_level
        ),
        (Action::Reject, Some(Reason::Locked), Some(1), None),
        "one second early: still locked, no second strike"
    );
    clock.advance_ms(1000);
    let d = decide();
    assert_eq!(d.action(), Action::Allow, "at Retry-After: admitted {d:?}");
}

pub struct Rig {
    pub engine: Engine,
    pub clock: ManualClock,
    pub sink: Arc<RecordingSink>,
    pub cfg: Arc<Config>,
    pub dir: tempfile::TempDir,
}

pub fn config(toml_text: &str, dir: &Path) -> Config {
    let mut cfg = Config::from_toml_str(toml_text, Path::new("test.toml"), &EnvMap::new())
        .expect("test config is valid");
    cfg.store.state_dir = dir.to_path_buf();
    cfg
}

/// An engine over `toml_text` at [`T0`], key lookups landing only on `land_lookups()`.
pub fn rig(toml_text: &str) -> Rig {
    let dir = tempfile::tempdir().expect("tempdir");
    rig_in(toml_text, dir, T0)
}

/// The store the engine suites run on, from `LIMITER_TEST_STORE`: `embedded` (the default),
/// `valkey` (one real standalone server) or `cluster` (a real three-primary Valkey Cluster),
/// the servers started once per test process. `cargo xtask test` runs the suites once per
/// store: one conformance suite, three stores, the same answers required.
pub fn test_store(cfg: &mut Config, now_ms: u64) -> Arc<dyn Store> {
    let which = std::env::var("LIMITER_TEST_STORE").unwrap_or_default();
    let address = match which.as_str() {
        "" | "embedded" => {
            return Arc::new(EmbeddedStore::open(&cfg.store, now_ms).expect("store opens"));
        }
        "valkey" => limiter_tests::valkey::shared_standalone(),
        "cluster" => limiter_tests::valkey::shared_cluster().map(|n| n[0].clone()),
        other => panic!("LIMITER_TEST_STORE={other:?}: embedded, valkey or cluster"),
    }
    .expect("LIMITER_TEST_STORE names a Valkey store, so valkey-server must be installed");
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    cfg.store.backend = StoreBackend::Valkey;
    cfg.store.valkey_address = Some(address);
    // The suites check the store's answers, so a decision must wait for them: under a loaded
    // machine the 50 ms default deadline opened the breaker and the local fallback admitted
    // past the budget (the outage behaviour has its own tests, `fleet_outage`, `store_fleet`).
    cfg.store.decision_timeout = Duration::from_secs(10);
    // Every rig its own key space on the shared server.
    cfg.store.key_prefix = format!(
        "t{}-{}:",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let store = limiter_daemon::fleet::open(&cfg.store, now_ms).expect("store opens");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.degraded() {
        assert!(
            std::time::Instant::now() < deadline,
            "the Valkey store never connected"
        );
        std::thread::park_timeout(Duration::from_millis(5));
    }
    store
}

pub fn rig_in(toml_text: &str, dir: tempfile::TempDir, start_ms: u64) -> Rig {
    let mut cfg = config(toml_text, dir.path());
    let clock = ManualClock::new(start_ms);
    let sink = Arc::new(RecordingSink::default());
    let store = test_store(&mut cfg, clock.now_ms());
    let cfg = Arc::new(cfg);
    let engine = Engine::with_options(
        Arc::clone(&cfg),
        store,
        sink.clone(),
        Arc::new(clock.clone()),
        EngineOptions {
            key_refresh: KeyRefresh::Manual,
        },
    );
    Rig {
        engine,
        clock,
        sink,
        cfg,
        dir,
    }
}

pub fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).expect("header name"),
            http::HeaderValue::from_bytes(v.as_bytes()).expect("header value"),
        );
    }
    h
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

impl Rig {
    pub fn get(&self, peer: &str, path: &str) -> Decision {
        self.request(peer, "GET", path, &HeaderMap::new())
    }

    pub fn request(&self, peer: &str, method: &str, path: &str, headers: &HeaderMap) -> Decision {
        settle(&self.engine);
        let method = http::Method::from_bytes(method.as_bytes()).expect("method");
        // Resolved as the proxy resolves a request's client where it comes in.
        let client = Decider::resolve(&self.engine, ip(peer), headers);
        self.engine.decide(&RequestView {
            client,
            method: &method,
            path,
            headers,
        })
    }

    pub fn land_lookups(&self) -> usize {
        self.engine.keys().process_pending()
    }

    pub fn advance_secs(&self, s: u64) {
        self.clock.advance_ms(s * 1000);
    }
}

impl Rig {
    pub fn clock_now(&self) -> u64 {
        self.clock.now_ms()
    }
}

/// One step of a traffic schedule: advance the clock this many milliseconds, then send one
/// request.
pub type Schedule = Vec<u64>;

/// Spends the anonymous hourly budget (600) politely, 100 requests a minute: six minutes.
pub fn spend_the_hour_politely() -> Schedule {
    vec![600; 600]
}

/// After [`spend_the_hour_politely`]: 100 requests a minute for an hour (below the 120 burst).
pub fn polite_crawler_after_budget() -> Schedule {
    let mut s = spend_the_hour_politely();
    s.extend(std::iter::repeat_n(600, 6_000));
    s
}

/// After [`spend_the_hour_politely`]: a runaway loop at 600 requests a minute for five minutes.
pub fn runaway_loop_after_budget() -> Schedule {
    let mut s = spend_the_hour_politely();
    s.extend(std::iter::repeat_n(100, 3_000));
    s
}

/// Lets what the store does behind the request path for earlier requests land (a Valkey
/// store's lease refills and give-backs) before the next: on the injected clock a schedule's
/// gap of 600 ms passes in microseconds, where in real time the background task (every
/// millisecond) would have finished. Without it, a refill still in flight at a slot's end was
/// counted in the next slot's answer (a `remaining` lower by its units, in about 1 run in 7).
pub fn settle(engine: &Engine) {
    assert!(
        engine.store().settle(Duration::from_secs(10)),
        "the store's background work did not land within 10 s"
    );
}

/// Runs `schedule` from `peer` through `engine`, every decision in order.
pub fn drive(engine: &Engine, clock: &ManualClock, peer: &str, schedule: &[u64]) -> Vec<Decision> {
    let headers = HeaderMap::new();
    schedule
        .iter()
        .map(|&gap| {
            clock.advance_ms(gap);
            settle(engine);
            engine.decide(&RequestView {
                client: Client::Addr(ip(peer)),
                method: &http::Method::GET,
                path: "/",
                headers: &headers,
            })
        })
        .collect()
}

/// What two stores must agree on for one decision (identities differ: each store has its own
/// hashing secret).
pub fn outcome_of(d: &Decision) -> (Action, Option<Reason>, Option<u64>, Option<u32>, String) {
    (
        d.action(),
        d.reason(),
        d.retry_after_secs(),
        d.lockout_level,
        format!("{:?}", d.windows),
    )
}
