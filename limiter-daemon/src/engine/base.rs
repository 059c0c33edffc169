//! The [`Engine`] itself: its collaborators and state, the construction options
//! ([`EngineOptions`], [`KeyRefresh`]), the constructors (which restore stored lockouts and
//! list entries into the sink), and the [`Runtime`] (configuration, resolver, lists) swapped
//! whole on reload, read on the request path from a per-thread cached copy. Every operation
//! is an `impl Engine` in a file of its own.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio_util::sync::CancellationToken;
use tokio_util::task::task_tracker::TaskTrackerToken;

use super::list_snapshot::ListSnapshot;
use super::net_senders::NetSenders;
use super::net_strikes::NetStrikes;
use super::range_reloads::RangeReloads;
use super::sink::EnforcementSink;
use super::tier_push::TierPusher;
use crate::clock::Clock;
use crate::config::Config;
use crate::fetch::proof_sources::ProofSources;
use crate::identity::crawler_dns::{CrawlerDns, DnsThread};
use crate::identity::hash::IdentityHasher;
use crate::identity::key_cache::{KeyCache, Refresher};
use crate::identity::web_bot_auth::directory::DirectoryCache;
use crate::identity::IdentityResolver;
use crate::store::Store;

/// How API key lookups land.
#[derive(Clone, Debug)]
pub enum KeyRefresh {
    /// A background thread that ends when the engine drops (library users).
    Background,
    /// A background thread that also ends when `stop` is cancelled, holding `drain` until it
    /// has ended: the daemon passes its shutdown's token and a hold on its task tracker, so
    /// draining waits for it.
    Until {
        stop: CancellationToken,
        drain: TaskTrackerToken,
    },
    /// Only when [`super::keys::KeyManager::process_pending`] is called (tests: "the lookup lands").
    Manual,
}

/// Construction options beyond the four collaborators.
#[derive(Clone, Debug)]
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

/// Configuration plus what is derived from it, and the allow/deny lists; swapped whole on
/// reload or list change. It holds no store or cache, so a stale copy keeps nothing big alive.
pub(crate) struct Runtime {
    pub cfg: Arc<Config>,
    pub resolver: Arc<IdentityResolver>,
    pub lists: Arc<ListSnapshot>,
}

static NEXT_ENGINE_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's copy of an engine's runtime: (engine id, generation, runtime). Reading a
    /// current copy touches no shared cache line, which is what lets decisions scale across
    /// cores (a shared lock or reference count would bounce between them on every request).
    static RUNTIME_CACHE: RefCell<Option<(u64, u64, Arc<Runtime>)>> = const { RefCell::new(None) };
}

pub struct Engine {
    id: u64,
    generation: AtomicU64,
    runtime: RwLock<Arc<Runtime>>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) sink: Arc<dyn EnforcementSink>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) hasher: IdentityHasher,
    pub(crate) key_cache: Arc<KeyCache>,
    pub(crate) strike_lock: Mutex<()>,
    pub(crate) net_strikes: Mutex<NetStrikes>,
    /// Who sent recently in each network: what a network's strike locks.
    pub(crate) net_senders: NetSenders,
    pub(crate) rng: Mutex<StdRng>,
    pub(crate) tiers: TierPusher,
    /// Reverse-DNS answers for claiming crawlers; outlives reloads (which reconfigure it).
    pub(crate) crawler_dns: Arc<CrawlerDns>,
    pub(crate) crawler_ranges: RangeReloads,
    /// The proofs fetched from `range_urls` and `asn_url`; outlives reloads.
    pub(crate) proofs: ProofSources,
    /// Signed agents' key directories; outlives reloads. Fetched by
    /// [`super::agents::fetch_directories`], which the daemon runs.
    pub(crate) agent_dirs: Arc<DirectoryCache>,
    _crawler_dns_thread: Option<DnsThread>,
    // Declared last: dropped after everything it might still use.
    _refresher: Option<Refresher>,
}

impl Engine {
    /// An engine with lookups landing on a background thread. Active lockouts and live
    /// allow/deny entries in the store are pushed to `sink` now (so a restart or reboot, which
    /// empties the kernel's maps, restores kernel enforcement).
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
        let crawler_dns = Arc::new(CrawlerDns::new(
            &cfg.crawlers,
            &cfg.networks,
            Arc::clone(&clock),
        ));
        // The crawler checks land the way key lookups do: on a thread of their own that ends
        // with the engine or the daemon's shutdown, or (manual) when a test runs them.
        let (refresher, dns_thread) = match opts.key_refresh {
            // Its own token, cancelled when the refresher (so the engine) drops.
            KeyRefresh::Background => {
                let own = CancellationToken::new();
                (
                    Some(key_cache.spawn_refresher(Arc::clone(&clock), &own, None)),
                    Some(crawler_dns.spawn(&own, None)),
                )
            }
            KeyRefresh::Until { stop, drain } => (
                Some(key_cache.spawn_refresher(Arc::clone(&clock), &stop, Some(drain.clone()))),
                Some(crawler_dns.spawn(&stop, Some(drain))),
            ),
            KeyRefresh::Manual => (None, None),
        };
        let rng = match cfg.lockout.jitter_seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_entropy(),
        };
        // The last good copies of the fetched proofs are in force from the first decision.
        let proofs = ProofSources::new(&cfg);
        let cfg = proofs.overlaid(cfg);
        let resolver = Arc::new(IdentityResolver::with_crawler_dns(
            &cfg,
            Some(Arc::clone(&crawler_dns)),
        ));
        let engine = Engine {
            id: NEXT_ENGINE_ID.fetch_add(1, Ordering::Relaxed),
            generation: AtomicU64::new(0),
            runtime: RwLock::new(Arc::new(Runtime {
                cfg,
                resolver,
                lists: Arc::new(ListSnapshot::default()),
            })),
            store,
            sink,
            clock,
            hasher,
            key_cache,
            strike_lock: Mutex::new(()),
            net_strikes: Mutex::default(),
            net_senders: NetSenders::default(),
            rng: Mutex::new(rng),
            tiers: TierPusher::default(),
            crawler_dns,
            crawler_ranges: RangeReloads::default(),
            proofs,
            agent_dirs: Arc::new(DirectoryCache::new()),
            _crawler_dns_thread: dns_thread,
            _refresher: refresher,
        };
        engine.reload_lists();
        engine.restore_lockouts();
        engine.restore_lists();
        engine
    }

    /// An engine over the configured store (embedded in `cfg.store.state_dir`, or Valkey),
    /// lookups on a background thread: what the daemon runs. Corrupt state files are set aside
    /// and logged (see [`Store::corrupt_files`]); only an unusable store is an error.
    pub fn open(
        cfg: Arc<Config>,
        sink: Arc<dyn EnforcementSink>,
        clock: Arc<dyn Clock>,
    ) -> Result<Engine, crate::store::StoreError> {
        let store = crate::fleet::open(&cfg.store, clock.now_ms())?;
        Ok(Engine::new(cfg, store, sink, clock))
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.runtime.read().cfg)
    }

    pub(crate) fn runtime(&self) -> Arc<Runtime> {
        Arc::clone(&self.runtime.read())
    }

    /// Runs `f` with the current runtime, from this thread's cached copy when it is current.
    pub(crate) fn with_runtime<R>(&self, f: impl FnOnce(&Runtime) -> R) -> R {
        let generation = self.generation.load(Ordering::Acquire);
        RUNTIME_CACHE.with(|cell| {
            if let Ok(cached) = cell.try_borrow() {
                if let Some((id, g, rt)) = &*cached {
                    if *id == self.id && *g == generation {
                        return f(rt);
                    }
                }
            }
            let rt = self.runtime();
            if let Ok(mut slot) = cell.try_borrow_mut() {
                *slot = Some((self.id, generation, Arc::clone(&rt)));
            }
            f(&rt)
        })
    }

    /// Replaces the runtime; every thread picks the new one up on its next decision.
    pub(crate) fn replace_runtime(&self, f: impl FnOnce(&Runtime) -> Runtime) {
        let mut w = self.runtime.write();
        *w = Arc::new(f(&w));
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Swaps in a new configuration (already validated). Counters, keys and lockouts stay.
    pub fn reload(&self, cfg: Arc<Config>) {
        self.crawler_dns.configure(&cfg.crawlers, &cfg.networks);
        // The fetched proofs are no part of the file: carried over, or read from disk.
        self.proofs.configure(&cfg);
        let cfg = self.proofs.overlaid(cfg);
        let resolver = Arc::new(IdentityResolver::with_crawler_dns(
            &cfg,
            Some(Arc::clone(&self.crawler_dns)),
        ));
        self.replace_runtime(|old| Runtime {
            cfg,
            resolver,
            lists: Arc::clone(&old.lists),
        });
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
    ) -> Result<Option<crate::model::KeyRecord>, crate::identity::key_cache::LookupFailed> {
        self.0
            .key(id)
            .map_err(|e| crate::identity::key_cache::LookupFailed(Box::new(e)))
    }
}
