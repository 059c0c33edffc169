//! [`ValkeyStore`]: construction (settings checked, hashing secret chosen, no server needed),
//! connecting, the store's own I/O runtime and the waits the synchronous methods make on it,
//! and the [`CountStore`] and [`RecordStore`] impls over [`Inner`]'s operations.

use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ipnet::IpNet;

use super::conn::{err, Access, Target, Topology, CONNECT_TIMEOUT};
use super::inner::Inner;
use super::layout::Layout;
use super::options::ValkeyOptions;
use super::{records, script, secret};
use crate::config::store::StoreSettings;
use crate::config::HashMode;
use crate::identity::hash::{IdKey, IdentityHasher};
use crate::model::{KeyRecord, ListEntry, ListKind, Lockout, StrikeRecord};
use crate::store::count::{CountOutcome, CountRequest, Usage};
use crate::store::error::StoreError;
use crate::store::gate::Gate;
use crate::store::traits::{lockout_then_count, CountStore, Counting, RecordStore};
use crate::store::unreadable::{RecordKind, Unreadable, UnreadableRecord};

/// The name of the store's I/O thread (sync calls made on it would wait on themselves).
const IO_THREAD: &str = "valkey-io";

pub struct ValkeyStore {
    pub(super) inner: Arc<Inner>,
    /// Always `Some` until drop (shut down in the background: dropping a runtime inside
    /// another one's task would panic).
    pub(super) rt: Option<tokio::runtime::Runtime>,
}

impl Drop for ValkeyStore {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl ValkeyStore {
    /// Checks the settings (address, CA file) and chooses the hashing secret; returns without
    /// the server (except once: a host with no local fleet secret asks Valkey briefly for the
    /// fleet's, and makes one if it cannot).
    pub fn new(opts: ValkeyOptions) -> Result<ValkeyStore, StoreError> {
        let target = Target::new(
            &opts.address,
            &Access {
                username: opts.username.clone(),
                password: opts.password.clone(),
                ca_file: opts.ca_file.clone(),
            },
        )?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(IO_THREAD)
            .enable_all()
            .build()
            .map_err(|e| err("runtime", e.to_string()))?;
        let layout = Layout::new(&opts.prefix);
        let (hasher, fleet_secret) = match (opts.hash, &opts.hash_secret) {
            (HashMode::Sha256, _) => (IdentityHasher::sha256(), None),
            (HashMode::Hmac, Some(s)) => (IdentityHasher::hmac(s), None),
            (HashMode::Hmac, None) => {
                match Self::choose_secret(&rt, &target, &layout, opts.secret_file.as_deref()) {
                    Ok(s) => (IdentityHasher::hmac(&s), Some(s)),
                    Err(e) => {
                        // Dropped in place, a runtime panics when this thread is inside
                        // another (the daemon's start): the error must reach the operator.
                        rt.shutdown_background();
                        return Err(e);
                    }
                }
            }
        };
        Ok(ValkeyStore {
            inner: Arc::new(Inner {
                target,
                layout,
                scripts: script::Scripts::new(),
                lockout_script: records::lockout_script(),
                hasher,
                fleet_secret,
                conn: parking_lot::RwLock::new(None),
                behind: parking_lot::RwLock::new(None),
                connecting: tokio::sync::Mutex::new(()),
                secret_mismatches: AtomicU64::new(0),
                errors: AtomicU64::new(0),
                host: opts.host,
                unreadable: Unreadable::default(),
                follower_error: parking_lot::Mutex::new(None),
                answered: tokio::sync::Notify::new(),
            }),
            rt: Some(rt),
        })
    }

    /// [`ValkeyStore::new`] as `[store]` configures it (what the daemon opens).
    pub fn from_settings(settings: &StoreSettings) -> Result<ValkeyStore, StoreError> {
        ValkeyStore::new(ValkeyOptions::from_settings(settings)?)
    }

    /// The local copy; else Valkey's (saved locally); else a fresh one (saved locally).
    fn choose_secret(
        rt: &tokio::runtime::Runtime,
        target: &Target,
        layout: &Layout,
        file: Option<&std::path::Path>,
    ) -> Result<Vec<u8>, StoreError> {
        if let Some(s) = file.map(secret::read_local).transpose()?.flatten() {
            return Ok(s);
        }
        let (t, key) = (target.clone(), layout.secret());
        let theirs = wait(rt.handle(), async move {
            let ask = async {
                let (mut c, _) = t.shared().await?;
                secret::fetch(&mut c, &key).await
            };
            tokio::time::timeout(CONNECT_TIMEOUT * 2, ask).await
        });
        let s = match theirs {
            Some(Ok(Ok(Some(s)))) => s,
            // Refused credentials or an untrusted certificate: the operator must fix them
            // (a fresh secret here would split the fleet's counts).
            Some(Ok(Err(e))) if super::conn::is_access_error(&e) => return Err(e),
            // Not reachable (or a cluster, empty): this host starts the fleet's secret.
            _ => secret::fresh(),
        };
        if let Some(f) = file {
            secret::write_local(f, &s)?;
        }
        Ok(s)
    }

    /// Constructs and connects, blocking (tests, tools).
    pub fn open_with(opts: ValkeyOptions) -> Result<ValkeyStore, StoreError> {
        let store = ValkeyStore::new(opts)?;
        let inner = store.inner.clone();
        store.block("connect", async move { inner.connect().await })?;
        Ok(store)
    }

    /// [`ValkeyStore::open_with`] from the four settings the old constructor took.
    pub fn open(
        address: &str,
        prefix: &str,
        hash: HashMode,
        hash_secret: Option<&[u8]>,
    ) -> Result<ValkeyStore, StoreError> {
        let mut opts = ValkeyOptions::new(address, prefix);
        opts.hash = hash;
        opts.hash_secret = hash_secret.map(<[u8]>::to_vec);
        ValkeyStore::open_with(opts)
    }

    /// Makes the connections, loads the script and reconciles the fleet secret; `Ok` at once
    /// when already connected. Runs on the store's runtime, so its connection drivers do.
    pub async fn connect(&self) -> Result<(), StoreError> {
        let inner = self.inner.clone();
        self.handle()
            .spawn(async move { inner.connect().await })
            .await
            .map_err(|e| err("connect", e.to_string()))?
    }

    /// Connected yet?
    pub fn is_connected(&self) -> bool {
        self.inner.conn.read().is_some()
    }

    /// Standalone server or cluster; `None` before the first connect.
    pub fn topology(&self) -> Option<Topology> {
        self.inner.conn.read().as_ref().map(|(_, t)| *t)
    }

    /// Why the lockout stream follower is not following now: `None` while it follows (or
    /// before it started).
    pub fn follower_error(&self) -> Option<String> {
        self.inner.follower_error.lock().clone()
    }

    /// This host's name on the lockout stream.
    pub fn host(&self) -> &str {
        &self.inner.host
    }

    /// The key names this store uses.
    pub fn layout(&self) -> &Layout {
        &self.inner.layout
    }

    /// A lease, waiting for it (see [`crate::store::fleet_remote::FleetRemote::lease`]).
    pub(super) fn run_lease(
        &self,
        asks: crate::store::lease::Asks,
        refill: bool,
        back: Vec<crate::store::lease::Unspent>,
    ) -> Result<crate::store::lease::Grants, StoreError> {
        self.run("lease", move |inner| async move {
            let conn = inner.conn("lease")?;
            if !back.is_empty() {
                super::lease::give_back(&inner.scripts, &inner.layout, conn.clone(), &back).await?;
            }
            super::lease::lease_all(&inner.scripts, &inner.layout, conn, asks, refill).await
        })
    }

    pub(super) fn handle(&self) -> &tokio::runtime::Handle {
        // `rt` is only taken in drop.
        self.rt
            .as_ref()
            .map(|r| r.handle())
            .expect("runtime until drop")
    }

    /// Runs `fut` on the store's runtime and waits for it: for the synchronous methods.
    fn block<T: Send + 'static>(
        &self,
        op: &'static str,
        fut: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        if std::thread::current().name() == Some(IO_THREAD) {
            return Err(err(op, "a blocking call on the store's own I/O thread"));
        }
        let r =
            wait(self.handle(), fut).ok_or_else(|| err(op, "the store's I/O runtime stopped"))?;
        if r.is_err() {
            self.inner.errors.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Runs `f(inner)` on the store's runtime and waits (most synchronous methods).
    fn run<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        self.block(op, f(self.inner.clone()))
    }
}

/// Runs `fut` on `rt` and waits for it on this thread (`Runtime::block_on` would panic when
/// this thread is inside another runtime). `None` if the runtime dropped it.
fn wait<T: Send + 'static>(
    rt: &tokio::runtime::Handle,
    fut: impl Future<Output = T> + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        // The caller waits on `rx`; it is gone only if it panicked.
        let _sent = tx.send(fut.await);
    });
    rx.recv().ok()
}

impl CountStore for ValkeyStore {
    fn hasher(&self) -> IdentityHasher {
        self.inner.hasher.clone()
    }

    fn check_and_count(&self, req: &CountRequest) -> Result<CountOutcome, StoreError> {
        let req = *req;
        self.run("check_and_count", move |inner| async move {
            let conn = inner.conn("check_and_count")?;
            script::count_all(&inner.scripts, &inner.layout, conn, req).await
        })
    }

    fn gate_and_count(&self, ip: IpAddr, req: &CountRequest) -> Result<Gate, StoreError> {
        lockout_then_count(self, ip, req)
    }

    fn gate_and_count_async(&self, _ip: IpAddr, req: &CountRequest) -> Counting<'_> {
        let conn = match self.inner.conn("check_and_count") {
            Ok(c) => c,
            Err(e) => return Counting::Ready(Err(e)),
        };
        let req = *req;
        Counting::Pending(Box::pin(async move {
            let r = script::count_all(&self.inner.scripts, &self.inner.layout, conn, req).await;
            if r.is_err() {
                self.inner.errors.fetch_add(1, Ordering::Relaxed);
            }
            r.map(Gate::Counted)
        }))
    }

    fn usage(&self, id: &IdKey, now_ms: u64) -> Result<Option<Usage>, StoreError> {
        let id = *id;
        self.run("usage", move |i| async move { i.usage(id, now_ms).await })
    }

    fn identity_count(&self) -> usize {
        // Counting would need a keyspace scan; the server's own INFO keyspace says it better.
        0
    }

    fn remote_errors(&self) -> u64 {
        self.inner.errors.load(Ordering::Relaxed)
    }

    fn secret_mismatches(&self) -> u64 {
        self.inner.secret_mismatches.load(Ordering::Relaxed)
    }
}

impl RecordStore for ValkeyStore {
    fn put_key(&self, record: KeyRecord) -> Result<(), StoreError> {
        self.run("put_key", move |i| async move { i.put_key(record).await })
    }

    fn key(&self, id: &str) -> Result<Option<KeyRecord>, StoreError> {
        let id = id.to_string();
        self.run("key", move |i| async move { i.key(&id).await })
    }

    fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.run("keys", move |i| async move { i.keys().await })
    }

    fn strikes(&self, ip: IpAddr) -> Result<Option<StrikeRecord>, StoreError> {
        self.run("strikes", move |i| async move { i.strikes(ip).await })
    }

    /// Also appends the lockout to the stream (as this host), like [`Self::put_lockout_async`].
    fn put_lockout(
        &self,
        lockout: Lockout,
        strikes: Option<StrikeRecord>,
    ) -> Result<(), StoreError> {
        self.run("put_lockout", move |i| async move {
            let host = i.host.clone();
            i.put_lockout(&lockout, strikes.as_ref(), &host)
                .await
                .map(drop)
        })
    }

    fn lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        self.run("lockout", move |i| async move { i.lockout(ip).await })
    }

    /// Also appends the lift to the stream (as this host).
    fn remove_lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        self.run("remove_lockout", move |i| async move {
            let host = i.host.clone();
            i.remove_lockout(ip, &host).await
        })
    }

    /// Also appends the forgetting to the stream (as this host), for the other hosts' replicas.
    fn forget_strikes(&self, ip: IpAddr) -> Result<bool, StoreError> {
        self.run("forget_strikes", move |i| async move {
            let host = i.host.clone();
            i.forget_strikes(ip, &host).await
        })
    }

    fn lockouts(&self, now_ms: u64) -> Result<Vec<Lockout>, StoreError> {
        self.run("lockouts", move |i| async move {
            let mut v: Vec<Lockout> = i
                .active_lockouts()
                .await?
                .into_iter()
                .map(|(l, _)| l)
                .filter(|l| l.is_active(now_ms))
                .collect();
            v.sort_by_key(|l| (l.since_ms, l.ip));
            Ok(v)
        })
    }

    fn list(&self, kind: ListKind) -> Result<Vec<ListEntry>, StoreError> {
        self.run("list", move |i| async move { i.list(kind).await })
    }

    fn put_list_entry(&self, kind: ListKind, entry: ListEntry) -> Result<(), StoreError> {
        self.run("put_list_entry", move |i| async move {
            i.put_list_entry(kind, entry).await
        })
    }

    fn remove_list_entry(&self, kind: ListKind, net: &IpNet) -> Result<bool, StoreError> {
        let net = *net;
        self.run("remove_list_entry", move |i| async move {
            i.remove_list_entry(kind, net).await
        })
    }

    fn unreadable(&self, kind: RecordKind) -> Result<Vec<UnreadableRecord>, StoreError> {
        self.run("unreadable", move |i| async move {
            i.unreadable_now(kind).await
        })
    }

    fn remove_unreadable(&self, kind: RecordKind, name: &str) -> Result<bool, StoreError> {
        let name = name.to_string();
        self.run("remove_unreadable", move |i| async move {
            i.remove_unreadable(kind, &name).await
        })
    }

    fn unreadable_counts(&self) -> Vec<(&'static str, u64)> {
        self.inner.unreadable.counts()
    }
}
