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
use limiter_daemon::clock::{Clock, ManualClock};
use limiter_daemon::config::{Config, EnvMap};
use limiter_daemon::engine::sink::EnforcementSink;
use limiter_daemon::engine::{Decision, Engine, EngineOptions, KeyRefresh, RequestInfo, Tier};
use limiter_daemon::store::EmbeddedStore;
use parking_lot::Mutex;

/// 2026-01-01T00:00:00Z.
pub const NEW_YEAR_MS: u64 = 1_767_225_600_000;
/// A start time safely inside a UTC hour and day: 2026-01-01T00:10:00Z.
pub const T0: u64 = NEW_YEAR_MS + 10 * 60_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkEvent {
    Lock { ip: IpAddr, secs: u64, level: u32 },
    Unlock { ip: IpAddr },
    SetTier { ip: IpAddr, tier: Tier },
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

pub fn rig_in(toml_text: &str, dir: tempfile::TempDir, start_ms: u64) -> Rig {
    let cfg = Arc::new(config(toml_text, dir.path()));
    let clock = ManualClock::new(start_ms);
    let sink = Arc::new(RecordingSink::default());
    let store = Arc::new(EmbeddedStore::open(&cfg.store, clock.now_ms()).expect("store opens"));
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
        self.engine.decide(&RequestInfo {
            peer: ip(peer),
            method,
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
