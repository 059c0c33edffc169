//! Invented API keys cannot buy store lookups without bound: lookups in flight are bounded per
//! source address (`keys.max_pending_per_source`, default 8); past the bound a new key is
//! metered as if it had none until that address's lookups land. Store lookups are counted by
//! a wrapper around the real embedded store.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::rig::*;
use ipnet::IpNet;
use limiter_daemon::clock::{Clock, ManualClock};
use limiter_daemon::embedded::EmbeddedStore;
use limiter_daemon::engine::{Engine, EngineOptions, KeyRefresh, Tier};
use limiter_daemon::identity::client_ip::Client;
use limiter_daemon::identity::hash::{IdKey, IdentityHasher};
use limiter_daemon::model::{KeyRecord, KeyStatus, ListEntry, ListKind, Lockout, StrikeRecord};
use limiter_daemon::store::{
    CountOutcome, CountRequest, CountStore, Gate, RecordStore, StoreError, Usage,
};

/// The embedded store, counting the key lookups the engine makes.
struct CountingStore {
    inner: EmbeddedStore,
    key_lookups: AtomicU64,
}

impl CountStore for CountingStore {
    fn hasher(&self) -> IdentityHasher {
        self.inner.hasher()
    }
    fn check_and_count(&self, req: &CountRequest) -> Result<CountOutcome, StoreError> {
        self.inner.check_and_count(req)
    }
    fn gate_and_count(&self, ip: IpAddr, req: &CountRequest) -> Result<Gate, StoreError> {
        self.inner.gate_and_count(ip, req)
    }
    fn usage(&self, id: &IdKey, now_ms: u64) -> Result<Option<Usage>, StoreError> {
        self.inner.usage(id, now_ms)
    }
    fn identity_count(&self) -> usize {
        self.inner.identity_count()
    }
}

impl RecordStore for CountingStore {
    fn put_key(&self, record: KeyRecord) -> Result<(), StoreError> {
        self.inner.put_key(record)
    }
    fn key(&self, id: &str) -> Result<Option<KeyRecord>, StoreError> {
        self.key_lookups.fetch_add(1, Ordering::Relaxed);
        self.inner.key(id)
    }
    fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.inner.keys()
    }
    fn strikes(&self, ip: IpAddr) -> Result<Option<StrikeRecord>, StoreError> {
        self.inner.strikes(ip)
    }
    fn put_lockout(&self, l: Lockout, s: Option<StrikeRecord>) -> Result<(), StoreError> {
        self.inner.put_lockout(l, s)
    }
    fn lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        self.inner.lockout(ip)
    }
    fn remove_lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        self.inner.remove_lockout(ip)
    }
    fn forget_strikes(&self, ip: IpAddr) -> Result<bool, StoreError> {
        self.inner.forget_strikes(ip)
    }
    fn lockouts(&self, now_ms: u64) -> Result<Vec<Lockout>, StoreError> {
        self.inner.lockouts(now_ms)
    }
    fn list(&self, kind: ListKind) -> Result<Vec<ListEntry>, StoreError> {
        self.inner.list(kind)
    }
    fn put_list_entry(&self, kind: ListKind, entry: ListEntry) -> Result<(), StoreError> {
        self.inner.put_list_entry(kind, entry)
    }
    fn remove_list_entry(&self, kind: ListKind, net: &IpNet) -> Result<bool, StoreError> {
        self.inner.remove_list_entry(kind, net)
    }
}

fn counting_engine(toml_text: &str, dir: &tempfile::TempDir) -> (Engine, Arc<CountingStore>) {
    let cfg = Arc::new(config(toml_text, dir.path()));
    let clock = ManualClock::new(T0);
    let store = Arc::new(CountingStore {
        inner: EmbeddedStore::open(&cfg.store, clock.now_ms()).expect("store opens"),
        key_lookups: AtomicU64::new(0),
    });
    let engine = Engine::with_options(
        cfg,
        store.clone(),
        Arc::new(RecordingSink::default()),
        Arc::new(clock),
        EngineOptions {
            key_refresh: KeyRefresh::Manual,
        },
    );
    (engine, store)
}

fn invented(n: u32) -> String {
    format!("rsa_{n:08x}_inventedinventedinvented")
}

fn present(engine: &Engine, peer: &str, key: &str) -> limiter_daemon::engine::Decision {
    let h = headers(&[("x-api-key", key)]);
    engine.decide(&limiter_daemon::engine::RequestView {
        client: Client::Addr(ip(peer)),
        method: &http::Method::GET,
        path: "/",
        headers: &h,
    })
}

#[test]
fn ten_thousand_invented_keys_from_one_address_buy_bounded_lookups() {
    let dir = tempfile::tempdir().unwrap();
    // Limits out of the way: this test is about lookups, not refusals.
    let (engine, store) = counting_engine(
        "[tiers.anon]\nburst = 65535\nhourly = 1000000\n\
         [tiers.session]\nburst = 65535\n[quota]\nanon = 1000000\n",
        &dir,
    );
    let cache = Arc::clone(engine.keys().cache());
    const BOUND: u64 = 8;
    const ROUNDS: u32 = 10;
    let mut pending_at_session = 0u64;
    for round in 0..ROUNDS {
        for n in 0..1_000 {
            let d = present(&engine, "192.0.2.7", &invented(round * 1_000 + n));
            assert_eq!(d.key_status, Some(KeyStatus::Pending), "{d:?}");
            if d.tier == Tier::Session {
                pending_at_session += 1;
            } else {
                assert_eq!(d.tier, Tier::Anon, "past the bound: metered as no key");
            }
            let (answers, in_flight, sources) = cache.held();
            assert!(
                in_flight as u64 <= BOUND && sources <= 1,
                "{in_flight} {sources}"
            );
            assert!(answers as u64 <= BOUND * u64::from(ROUNDS));
        }
        // The refresher lands what is in flight; the address may queue again afterwards.
        assert_eq!(engine.keys().process_pending() as u64, BOUND);
    }
    let lookups = store.key_lookups.load(Ordering::Relaxed);
    let (negative, in_flight, sources) = cache.held();
    assert_eq!((in_flight, sources), (0, 0), "nothing left in flight");
    assert_eq!(lookups, BOUND * u64::from(ROUNDS), "8 lookups per round");
    assert!(
        lookups <= BOUND + negative as u64,
        "every lookup past the bound left a negative answer: {lookups} vs {negative}"
    );
    assert_eq!(
        pending_at_session, lookups,
        "one rung down only while queued"
    );

    // A negatively cached id costs nothing more within negative_ttl.
    let d = present(&engine, "192.0.2.7", &invented(0));
    assert_eq!(d.key_status, Some(KeyStatus::Invalid));
    assert_eq!(store.key_lookups.load(Ordering::Relaxed), lookups);
}

#[test]
fn one_address_at_its_bound_does_not_starve_another() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _store) = counting_engine("[keys]\nmax_pending_per_source = 2\n", &dir);
    for n in 0..2 {
        assert_eq!(
            present(&engine, "192.0.2.7", &invented(n)).tier,
            Tier::Session
        );
    }
    let d = present(&engine, "192.0.2.7", &invented(2));
    assert_eq!(
        (d.tier, d.key_status),
        (Tier::Anon, Some(KeyStatus::Pending))
    );
    // The same key again from its address: still deferred, no lookup queued for it.
    assert_eq!(present(&engine, "192.0.2.7", &invented(2)).tier, Tier::Anon);
    assert_eq!(engine.keys().cache().held().1, 2);
    // Another address is not charged for the first one's lookups.
    let d = present(&engine, "198.51.100.9", &invented(3));
    assert_eq!(
        (d.tier, d.key_status),
        (Tier::Session, Some(KeyStatus::Pending))
    );
    // An IPv6 caller cannot rotate addresses inside its /64 to get more.
    assert_eq!(
        present(&engine, "2001:db8::1", &invented(4)).tier,
        Tier::Session
    );
    assert_eq!(
        present(&engine, "2001:db8::2", &invented(5)).tier,
        Tier::Session
    );
    assert_eq!(
        present(&engine, "2001:db8::3", &invented(6)).tier,
        Tier::Anon
    );
    engine.keys().process_pending();
    assert_eq!(
        present(&engine, "192.0.2.7", &invented(7)).tier,
        Tier::Session,
        "once its lookups land, the address may queue again"
    );
}

#[test]
fn the_bound_is_validated() {
    let err = limiter_daemon::config::Config::from_toml_str(
        "[keys]\nmax_pending_per_source = 0\n",
        std::path::Path::new("t.toml"),
        &limiter_daemon::config::EnvMap::new(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("keys.max_pending_per_source"), "{err}");
}
