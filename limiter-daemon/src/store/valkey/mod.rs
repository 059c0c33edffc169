//! A Valkey store: the same [`Store`](crate::store::Store) semantics with counters in Valkey
//! (standalone or Valkey Cluster, detected at connect), so a fleet shares budgets.
//!
//! - Construction ([`ValkeyStore::new`]) checks the settings and chooses the hashing secret
//!   without needing the server; [`ValkeyStore::connect`] (retried by the caller until it
//!   succeeds) makes the connections, loads the script and reconciles the fleet secret
//!   ([`secret`]). Calls before that fail at once.
//! - The request path awaits [`CountStore::gate_and_count_async`]: one script call
//!   ([`script`]) on one multiplexed connection ([`conn`]), in one cluster slot for every kind
//!   of caller ([`layout`]). Lockouts are not asked on that path: each host keeps a replica fed
//!   by the lockout stream ([`stream`]).
//! - The synchronous trait methods (admin, the key cache, tests) run their call on the store's
//!   own one-thread runtime (`valkey-io`, which also drives the connections and the stream
//!   follower) and wait for it, so they work from any thread, inside a runtime or not.
//!
//! What this backend does not do itself: fall back when the server is down (the engine wraps
//! it in [`crate::store::remote::FleetStore`]).

pub mod conn;
pub mod fleet_remote;
pub mod layout;
mod records;
pub mod script;
pub mod secret;
pub mod stream;

use std::future::Future;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use ipnet::IpNet;

pub use self::conn::Topology;
use self::conn::{err, Access, Conn, Target, CONNECT_TIMEOUT};
use self::layout::Layout;
use super::count::{CountOutcome, CountRequest, Usage};
use super::error::StoreError;
use super::gate::Gate;
use super::traits::{lockout_then_count, CountStore, Counting, RecordStore};
use crate::config::store::{StoreSettings, ValkeyPassword};
use crate::config::HashMode;
use crate::identity::hash::{IdKey, IdentityHasher, Namespace};
use crate::model::{KeyRecord, ListEntry, ListKind, Lockout, StrikeRecord};

/// The name of the store's I/O thread (sync calls made on it would wait on themselves).
const IO_THREAD: &str = "valkey-io";
/// The local copy of the fleet secret, in the state directory.
pub const SECRET_FILE: &str = "fleet-secret";

/// What a [`ValkeyStore`] is built from (see [`ValkeyOptions::from_settings`]).
#[derive(Clone, Debug)]
pub struct ValkeyOptions {
    /// `host:port`, `redis://host:port` or `rediss://host:port`.
    pub address: String,
    pub prefix: String,
    pub hash: HashMode,
    /// A configured HMAC secret; `None`: the fleet's (local file and Valkey).
    pub hash_secret: Option<Vec<u8>>,
    pub username: Option<String>,
    pub password: Option<ValkeyPassword>,
    pub ca_file: Option<PathBuf>,
    /// Where the fleet secret is kept locally (`None`: only in Valkey, for tests).
    pub secret_file: Option<PathBuf>,
    /// This host on the lockout stream.
    pub host: String,
}

impl std::fmt::Debug for ValkeyPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<redacted from {}>", self.setting)
    }
}

/// `<hostname>:<pid>`, this process's default name on the lockout stream.
pub fn default_host() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let name = if name.is_empty() { "host".into() } else { name };
    format!("{name}:{}", std::process::id())
}

impl ValkeyOptions {
    /// `address` with defaults (hmac, fleet secret in Valkey only, no AUTH).
    pub fn new(address: &str, prefix: &str) -> ValkeyOptions {
        ValkeyOptions {
            address: address.to_string(),
            prefix: prefix.to_string(),
            hash: HashMode::Hmac,
            hash_secret: None,
            username: None,
            password: None,
            ca_file: None,
            secret_file: None,
            host: default_host(),
        }
    }

    /// As `[store]` configures it (the fleet secret kept in `<state_dir>/fleet-secret`).
    pub fn from_settings(s: &StoreSettings) -> Result<ValkeyOptions, StoreError> {
        let address = s
            .valkey_address
            .clone()
            .ok_or_else(|| err("connect", "store.valkey_address is not set"))?;
        Ok(ValkeyOptions {
            address,
            prefix: s.key_prefix.clone(),
            hash: s.hash,
            hash_secret: s.hash_secret.clone(),
            username: s.valkey_username.clone(),
            password: s.valkey_password.clone(),
            ca_file: s.valkey_ca_file.clone(),
            secret_file: Some(s.state_dir.join(SECRET_FILE)),
            host: s.host_id.clone().unwrap_or_else(default_host),
        })
    }
}

/// What the store's tasks share.
struct Inner {
    target: Target,
    layout: Layout,
    scripts: script::Scripts,
    lockout_script: redis::Script,
    hasher: IdentityHasher,
    /// The fleet secret this process hashes with, to reconcile with Valkey's at connect.
    fleet_secret: Option<Vec<u8>>,
    /// Set once by the first successful connect.
    conn: OnceLock<(Conn, Topology)>,
    connecting: tokio::sync::Mutex<()>,
    secret_mismatches: AtomicU64,
    errors: AtomicU64,
    host: String,
}

pub struct ValkeyStore {
    inner: Arc<Inner>,
    /// Always `Some` until drop (shut down in the background: dropping a runtime inside
    /// another one's task would panic).
    rt: Option<tokio::runtime::Runtime>,
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
                let s = Self::choose_secret(&rt, &target, &layout, opts.secret_file.as_deref())?;
                (IdentityHasher::hmac(&s), Some(s))
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
                conn: OnceLock::new(),
                connecting: tokio::sync::Mutex::new(()),
                secret_mismatches: AtomicU64::new(0),
                errors: AtomicU64::new(0),
                host: opts.host,
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
            Some(Ok(Err(e))) if e.to_string().contains("store.valkey_") => return Err(e),
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
        self.inner.conn.get().is_some()
    }

    /// Standalone server or cluster; `None` before the first connect.
    pub fn topology(&self) -> Option<Topology> {
        self.inner.conn.get().map(|(_, t)| *t)
    }

    /// This host's name on the lockout stream.
    pub fn host(&self) -> &str {
        &self.inner.host
    }

    /// The key names this store uses.
    pub fn layout(&self) -> &Layout {
        &self.inner.layout
    }

    fn handle(&self) -> &tokio::runtime::Handle {
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

impl Inner {
    /// The shared connection, or an error at once before the first connect.
    fn conn(&self, op: &'static str) -> Result<Conn, StoreError> {
        self.conn.get().map(|(c, _)| c.clone()).ok_or_else(|| {
            err(
                op,
                format!("not connected to {} yet", self.target.address()),
            )
        })
    }

    fn topology(&self) -> Topology {
        self.conn.get().map_or(Topology::Standalone, |(_, t)| *t)
    }

    async fn connect(&self) -> Result<(), StoreError> {
        let _one_at_a_time = self.connecting.lock().await;
        if self.conn.get().is_some() {
            return Ok(());
        }
        let (mut conn, topology) = self.target.shared().await?;
        // Loaded up front so the first decision does not pay for NOSCRIPT; `invoke` reloads
        // a script by itself if the server forgot it (restart, SCRIPT FLUSH).
        for s in [
            &self.scripts.count,
            &self.scripts.refund,
            &self.lockout_script,
        ] {
            s.prepare_invoke()
                .load_async(&mut conn)
                .await
                .map_err(|e| self.target.explain("script load", &e))?;
        }
        if let Some(ours) = &self.fleet_secret {
            let key = self.layout.secret();
            if let Some(theirs) = secret::settle(&mut conn, &key, ours).await? {
                self.secret_mismatches.fetch_add(1, Ordering::Relaxed);
                // Fingerprints (keyed hashes) tell the two apart in the log; never the secrets.
                let print =
                    |s: &[u8]| IdentityHasher::hmac(s).id(Namespace::Compat, b"fingerprint");
                let (ours_id, theirs_id) = (print(ours), print(&theirs));
                tracing::error!(
                    event = "hash_secret_mismatch",
                    key = %key,
                    ours = %ours_id.display(),
                    valkey = %theirs_id.display(),
                    "the fleet hash secret in Valkey differs from this host's: hosts now count \
                     one caller under different keys; keeping this host's secret. Make every \
                     host's <state_dir>/fleet-secret and Valkey's {key} the same, then restart"
                );
            }
        }
        // Set only here, under the mutex: the first connect wins and stays.
        let _first = self.conn.set((conn, topology));
        Ok(())
    }
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
}
