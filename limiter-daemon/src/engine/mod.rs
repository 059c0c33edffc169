//! The decision engine: tier ladder, burst/hourly/daily/key windows, scan delays, strikes and
//! lockouts. [`decision`] holds the types every HTTP surface renders; [`sink`] is how lockouts
//! and verified tiers reach the kernel.
//!
//! # API (what the HTTP surfaces call)
//!
//! ```no_run
//! use std::sync::Arc;
//! use limiter_daemon::{clock::SystemClock, config::{Config, env_from_process}};
//! use limiter_daemon::engine::{Engine, RequestInfo, sink::NoKernel};
//! use limiter_daemon::store::EmbeddedStore;
//!
//! let cfg = Arc::new(Config::load("limiter.toml".as_ref(), &env_from_process())?);
//! let clock = Arc::new(SystemClock);
//! let store = Arc::new(EmbeddedStore::open(&cfg.store, limiter_daemon::clock::Clock::now_ms(&*clock))?);
//! let engine = Engine::new(cfg, store, Arc::new(NoKernel), clock);
//! let headers = http::HeaderMap::new();
//! let d = engine.decide(&RequestInfo {
//!     peer: "203.0.113.7".parse()?, method: "GET", path: "/api/feeds", headers: &headers,
//! });
//! // d.action: Allow | Delay (hold d.delay, then forward) | Reject (429, d.reason, d.retry_after_secs)
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! - [`Engine::decide`] is synchronous and never blocks on I/O (the embedded store is memory;
//!   key lookups land behind the request). It never fails: a decision is a value.
//! - [`Engine::explain`]: the same decision without counting anything (admin dry-run).
//! - [`Engine::attempt`]: the compatibility call (120/min burst, no hourly budget).
//! - [`Engine::keys`]: issue (secret returned once), revoke, list API keys.
//! - [`Engine::lockouts`]: list, query, lift, and lock by hand.
//! - [`Engine::lists`]: allow/deny CIDR lists.
//! - [`Engine::client`]: one client's windows, strikes and lockout (admin view).
//! - [`Engine::reload`]: swap in a new validated [`Config`].

pub mod client;
pub mod compat;
pub mod decide;
pub mod decision;
pub mod error;
pub mod keys;
pub mod lists;
pub mod lockouts;
pub mod request;
pub mod sink;
pub mod strikes;
pub mod tier_push;

use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use rand::rngs::StdRng;
use rand::SeedableRng;

pub use decision::{Action, Decision, DelayKind, KeyStatus, Reason, Tier, WindowKind, WindowState};
pub use error::EngineError;
pub use request::RequestInfo;

use self::lists::ListSnapshot;
use self::sink::EnforcementSink;
use self::tier_push::TierPusher;
use crate::clock::Clock;
use crate::config::Config;
use crate::identity::hash::IdentityHasher;
use crate::identity::key_cache::{KeyCache, RefresherGuard};
use crate::identity::IdentityResolver;
use crate::store::Store;

/// How API key lookups land.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRefresh {
    /// A background thread (the daemon).
    Background,
    /// Only when [`keys::KeyManager::process_pending`] is called (tests: "the lookup lands").
    Manual,
}

/// Construction options beyond the four collaborators.
#[derive(Clone, Copy, Debug)]
pub struct EngineOptions {
    pub key_refresh: KeyRefresh,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            key_refresh: KeyRefresh::Background,
        }
    }
}

/// Configuration plus what is derived from it; swapped whole on reload.
pub(crate) struct Runtime {
    pub cfg: Arc<Config>,
    pub resolver: IdentityResolver,
}

pub struct Engine {
    runtime: RwLock<Arc<Runtime>>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) sink: Arc<dyn EnforcementSink>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) hasher: IdentityHasher,
    pub(crate) key_cache: Arc<KeyCache>,
    pub(crate) strike_lock: Mutex<()>,
    pub(crate) rng: Mutex<StdRng>,
    pub(crate) lists: RwLock<Arc<ListSnapshot>>,
    pub(crate) tiers: TierPusher,
    // Declared last: dropped after everything it might still use.
    _refresher: Option<RefresherGuard>,
}

impl Engine {
    /// An engine with lookups landing on a background thread. Active lockouts in the store are
    /// pushed to `sink` now (so a restart or reboot restores kernel enforcement).
    pub fn new(
        cfg: Arc<Config>,
        store: Arc<dyn Store>,
        sink: Arc<dyn EnforcementSink>,
        clock: Arc<dyn Clock>,
    ) -> Engine {
        Engine::with_options(cfg, store, sink, clock, EngineOptions::default())
    }

    pub fn with_options(
        cfg: Arc<Config>,
        store: Arc<dyn Store>,
        sink: Arc<dyn EnforcementSink>,
        clock: Arc<dyn Clock>,
        opts: EngineOptions,
    ) -> Engine {
        let hasher = store.hasher();
        let lookup: Arc<dyn crate::identity::key_cache::KeyLookup> =
            Arc::new(StoreLookup(Arc::clone(&store)));
        let key_cache = Arc::new(KeyCache::new(lookup, hasher.clone(), &cfg.keys));
        let refresher = match opts.key_refresh {
            KeyRefresh::Background => Some(key_cache.spawn_refresher(Arc::clone(&clock))),
            KeyRefresh::Manual => None,
        };
        let rng = match cfg.lockout.jitter_seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_entropy(),
        };
        let resolver = IdentityResolver::new(&cfg, Arc::clone(&key_cache));
        let engine = Engine {
            runtime: RwLock::new(Arc::new(Runtime { cfg, resolver })),
            store,
            sink,
            clock,
            hasher,
            key_cache,
            strike_lock: Mutex::new(()),
            rng: Mutex::new(rng),
            lists: RwLock::new(Arc::new(ListSnapshot::default())),
            tiers: TierPusher::default(),
            _refresher: refresher,
        };
        engine.reload_lists();
        engine.restore_lockouts();
        engine
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.runtime.read().cfg)
    }

    pub(crate) fn runtime(&self) -> Arc<Runtime> {
        Arc::clone(&self.runtime.read())
    }

    /// Swaps in a new configuration (already validated). Counters, keys and lockouts stay.
    pub fn reload(&self, cfg: Arc<Config>) {
        let resolver = IdentityResolver::new(&cfg, Arc::clone(&self.key_cache));
        *self.runtime.write() = Arc::new(Runtime { cfg, resolver });
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Pushes every active stored lockout into the sink (called at construction).
    pub fn restore_lockouts(&self) -> usize {
        let now = self.clock.now_ms();
        match self.store.lockouts(now) {
            Ok(list) => {
                for l in &list {
                    self.sink.lock(
                        l.ip,
                        std::time::Duration::from_millis(l.remaining_ms(now)),
                        l.level,
                    );
                }
                list.len()
            }
            Err(err) => {
                tracing::error!(error = %err, "cannot read stored lockouts to restore them");
                0
            }
        }
    }
}

/// Adapts the store to the key cache's lookup trait.
struct StoreLookup(Arc<dyn Store>);

impl crate::identity::key_cache::KeyLookup for StoreLookup {
    fn lookup_key(
        &self,
        id: &str,
    ) -> Result<Option<crate::store::KeyRecord>, crate::store::StoreError> {
        self.0.lookup_key(id)
    }
}
