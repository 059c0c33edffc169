//! A stand-in for a fleet's shared store, for the logic of `FleetStore` (breaker, over-limit
//! cache, writer, replica, stream) with failures on demand: one "server" (a real embedded store,
//! an event log, a mode: up, down or frozen) shared by several hosts' remotes. The same
//! behaviours are tested against a real `valkey-server` in the `fleet_valkey_*` tests.

#![allow(dead_code, reason = "each test crate uses a different part")]

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use limiter_daemon::config::store::StoreSettings;
use limiter_daemon::embedded::EmbeddedStore;
use limiter_daemon::identity::hash::{IdKey, IdentityHasher};
use limiter_daemon::model::{KeyRecord, ListEntry, ListKind, Lockout, StrikeRecord};
use limiter_daemon::store::count::{CountOutcome, CountRequest, Usage};
use limiter_daemon::store::fleet_remote::FleetRemote;
use limiter_daemon::store::lockout_events::{LockoutEvent, LockoutEvents};
use limiter_daemon::store::{CountStore, Counting, Gate, RecordStore, StoreError, StoreFuture};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Up,
    /// Refuses connections: every call fails at once.
    Down,
    /// Accepts and never answers (SIGSTOP).
    Frozen,
}

pub struct Server {
    pub store: EmbeddedStore,
    pub mode: Mutex<Mode>,
    pub events: Mutex<Vec<LockoutEvent>>,
    pub appended: Notify,
    /// Counting calls that reached the server.
    pub count_calls: AtomicU64,
    _dir: tempfile::TempDir,
}

impl Server {
    pub fn new() -> Arc<Self> {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(&StoreSettings::in_dir(dir.path()), 0).unwrap();
        Arc::new(Server {
            store,
            mode: Mutex::new(Mode::Up),
            events: Mutex::new(Vec::new()),
            appended: Notify::new(),
            count_calls: AtomicU64::new(0),
            _dir: dir,
        })
    }

    pub fn set(&self, m: Mode) {
        *self.mode.lock() = m;
    }

    fn up(&self, op: &'static str) -> Result<(), StoreError> {
        match *self.mode.lock() {
            Mode::Up => Ok(()),
            m => Err(StoreError::Valkey {
                op,
                message: format!("server {m:?}"),
            }),
        }
    }

    fn frozen(&self) -> bool {
        *self.mode.lock() == Mode::Frozen
    }

    fn append(&self, e: LockoutEvent) {
        self.events.lock().push(e);
        self.appended.notify_waiters();
    }

    pub fn calls(&self) -> u64 {
        self.count_calls.load(Ordering::SeqCst)
    }
}

/// One host's connection to the server.
pub struct Remote {
    pub server: Arc<Server>,
    host: String,
    rt: Option<tokio::runtime::Runtime>,
}

impl Remote {
    pub fn new(server: &Arc<Server>, host: &str) -> Arc<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        Arc::new(Remote {
            server: Arc::clone(server),
            host: host.to_string(),
            rt: Some(rt),
        })
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        // Dropping a runtime inside another blocks; let it go in the background.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Waits forever while the server is frozen, then fails or answers.
async fn reply<T>(
    s: &Server,
    op: &'static str,
    f: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    if s.frozen() {
        std::future::pending::<()>().await;
    }
    s.up(op)?;
    f()
}

impl CountStore for Remote {
    fn hasher(&self) -> IdentityHasher {
        self.server.store.hasher()
    }
    fn check_and_count(&self, req: &CountRequest) -> Result<CountOutcome, StoreError> {
        self.server.count_calls.fetch_add(1, Ordering::SeqCst);
        self.server.up("check_and_count")?;
        self.server.store.check_and_count(req)
    }
    fn gate_and_count(&self, _ip: IpAddr, req: &CountRequest) -> Result<Gate, StoreError> {
        self.check_and_count(req).map(Gate::Counted)
    }
    fn gate_and_count_async(&self, _ip: IpAddr, req: &CountRequest) -> Counting<'_> {
        self.server.count_calls.fetch_add(1, Ordering::SeqCst);
        let req = *req;
        let s = Arc::clone(&self.server);
        Counting::Pending(Box::pin(async move {
            reply(&s, "check_and_count", || {
                s.store.check_and_count(&req).map(Gate::Counted)
            })
            .await
        }))
    }
    fn usage(&self, id: &IdKey, now_ms: u64) -> Result<Option<Usage>, StoreError> {
        self.server.up("usage")?;
        self.server.store.usage(id, now_ms)
    }
    fn identity_count(&self) -> usize {
        0
    }
}

impl RecordStore for Remote {
    fn put_key(&self, record: KeyRecord) -> Result<(), StoreError> {
        self.server.up("put_key")?;
        self.server.store.put_key(record)
    }
    fn key(&self, id: &str) -> Result<Option<KeyRecord>, StoreError> {
        self.server.up("key")?;
        self.server.store.key(id)
    }
    fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.server.up("keys")?;
        self.server.store.keys()
    }
    fn strikes(&self, ip: IpAddr) -> Result<Option<StrikeRecord>, StoreError> {
        self.server.up("strikes")?;
        self.server.store.strikes(ip)
    }
    fn put_lockout(&self, l: Lockout, s: Option<StrikeRecord>) -> Result<(), StoreError> {
        self.server.up("put_lockout")?;
        self.server.store.put_lockout(l, s)
    }
    fn lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        self.server.up("lockout")?;
        self.server.store.lockout(ip)
    }
    fn remove_lockout(&self, ip: IpAddr) -> Result<Option<Lockout>, StoreError> {
        self.server.up("remove_lockout")?;
        self.server.store.remove_lockout(ip)
    }
    fn forget_strikes(&self, ip: IpAddr) -> Result<bool, StoreError> {
        self.server.up("forget_strikes")?;
        let had = self.server.store.forget_strikes(ip)?;
        self.server.append(LockoutEvent::Lifted {
            ip,
            host: self.host.clone(),
            forget_strikes: true,
        });
        Ok(had)
    }
    fn lockouts(&self, now_ms: u64) -> Result<Vec<Lockout>, StoreError> {
        self.server.up("lockouts")?;
        self.server.store.lockouts(now_ms)
    }
    fn list(&self, kind: ListKind) -> Result<Vec<ListEntry>, StoreError> {
        self.server.up("list")?;
        self.server.store.list(kind)
    }
    fn put_list_entry(&self, kind: ListKind, entry: ListEntry) -> Result<(), StoreError> {
        self.server.up("put_list_entry")?;
        self.server.store.put_list_entry(kind, entry)
    }
    fn remove_list_entry(&self, kind: ListKind, net: &IpNet) -> Result<bool, StoreError> {
        self.server.up("remove_list_entry")?;
        self.server.store.remove_list_entry(kind, net)
    }
}

impl FleetRemote for Remote {
    fn host(&self) -> &str {
        &self.host
    }

    fn connect(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move { reply(&self.server, "connect", || Ok(())).await })
    }

    fn ping(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move { reply(&self.server, "ping", || Ok(())).await })
    }

    fn put_lockout_async(&self, l: Lockout, st: Option<StrikeRecord>) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let s = &self.server;
            reply(s, "put_lockout", || {
                let longer = s
                    .store
                    .lockout(l.ip)?
                    .is_none_or(|old| l.until_ms > old.until_ms);
                if longer {
                    s.store.put_lockout(l.clone(), st)?;
                }
                s.append(LockoutEvent::Locked {
                    lockout: l,
                    strikes: st,
                    host: self.host.clone(),
                });
                Ok(())
            })
            .await
        })
    }

    fn remove_lockout_async(&self, ip: IpAddr) -> StoreFuture<'_, Option<Lockout>> {
        Box::pin(async move {
            let s = &self.server;
            reply(s, "remove_lockout", || {
                let old = s.store.remove_lockout(ip)?;
                s.append(LockoutEvent::Lifted {
                    ip,
                    host: self.host.clone(),
                    forget_strikes: false,
                });
                Ok(old)
            })
            .await
        })
    }

    fn publish(&self, event: LockoutEvent) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let s = &self.server;
            reply(s, "publish", || {
                s.append(event);
                Ok(())
            })
            .await
        })
    }

    fn follow(&self, sink: Arc<dyn LockoutEvents>, cancel: CancellationToken) {
        let s = Arc::clone(&self.server);
        self.rt.as_ref().unwrap().spawn(async move {
            let active = s
                .store
                .lockouts(0)
                .unwrap()
                .into_iter()
                .map(|l| {
                    let st = s.store.strikes(l.ip).unwrap();
                    (l, st)
                })
                .collect();
            let mut seen = s.events.lock().len();
            sink.reload(active);
            loop {
                let wake = s.appended.notified();
                let fresh: Vec<LockoutEvent> = s.events.lock()[seen..].to_vec();
                seen += fresh.len();
                for e in &fresh {
                    sink.apply(e);
                }
                if fresh.is_empty() {
                    tokio::select! {
                        () = wake => {}
                        () = cancel.cancelled() => return,
                    }
                }
            }
        });
    }

    fn spawn(&self, task: Pin<Box<dyn Future<Output = ()> + Send + 'static>>) {
        self.rt.as_ref().unwrap().spawn(task);
    }
}

/// Polls `f` until it is true, or fails after `secs`.
pub fn eventually(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    limiter_tests::poll(Duration::from_secs(secs), what, || f().then_some(()));
}

/// Records what the fleet delivered to "the engine".
#[derive(Default)]
pub struct Delivered {
    pub applied: Mutex<Vec<LockoutEvent>>,
    pub reloads: Mutex<Vec<Vec<Lockout>>>,
}

impl LockoutEvents for Delivered {
    fn apply(&self, event: &LockoutEvent) {
        self.applied.lock().push(event.clone());
    }
    fn reload(&self, active: Vec<(Lockout, Option<StrikeRecord>)>) {
        self.reloads
            .lock()
            .push(active.into_iter().map(|(l, _)| l).collect());
    }
}
