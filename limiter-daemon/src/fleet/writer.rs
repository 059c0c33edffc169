//! The lockout writer: this host's lockouts, lifts and prefix events go to the shared store
//! from a queue, in order, off the request path, so a decision that strikes never waits on
//! the store and no lock is held across a remote call. While the store is down the queue
//! keeps them (bounded) and they are written when it answers again; the store's own rule
//! (the longer lockout wins) settles overlaps with what other hosts wrote meanwhile.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::model::{Lockout, StrikeRecord};
use crate::store::fleet_remote::FleetRemote;
use crate::store::lockout_events::LockoutEvent;

/// Writes queued at most; past it the oldest is dropped (and counted): the kernel and this
/// host's replica still hold it, only the fleet does not learn it.
pub const MAX_QUEUED: usize = 100_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    Put(Lockout, Option<StrikeRecord>),
    Remove(IpAddr),
    Publish(LockoutEvent),
}

#[derive(Default)]
pub struct Writer {
    queue: Mutex<VecDeque<Write>>,
    drained: Condvar,
    notify: Notify,
    dropped: AtomicU64,
    written: AtomicU64,
}

impl Writer {
    pub fn push(&self, w: Write) {
        {
            let mut q = self.queue.lock();
            if q.len() >= MAX_QUEUED {
                q.pop_front();
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            q.push_back(w);
        }
        self.notify.notify_one();
    }

    /// What is still to be written, in order.
    pub fn pending(&self) -> Vec<Write> {
        self.queue.lock().iter().cloned().collect()
    }

    /// Blocks until the queue is empty or `timeout` passes; `true` when empty (one-shot
    /// commands that must not exit before their write is in the store).
    pub fn wait_drained(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut q = self.queue.lock();
        while !q.is_empty() {
            if self.drained.wait_until(&mut q, deadline).timed_out() {
                return q.is_empty();
            }
        }
        true
    }

    pub fn queued(&self) -> usize {
        self.queue.lock().len()
    }

    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Writes the queue to `remote` until `cancel`; a failed write is retried every
    /// `retry`, and nothing behind it goes first.
    pub async fn run(
        self: Arc<Self>,
        remote: Arc<dyn FleetRemote>,
        deadline: Duration,
        retry: Duration,
        cancel: CancellationToken,
    ) {
        loop {
            let notified = self.notify.notified();
            let next = self.queue.lock().front().cloned();
            let Some(w) = next else {
                tokio::select! {
                    () = notified => continue,
                    () = cancel.cancelled() => return,
                }
            };
            let done = tokio::time::timeout(deadline, apply(&*remote, w.clone())).await;
            match done {
                Ok(Ok(())) => {
                    let mut q = self.queue.lock();
                    if q.front() == Some(&w) {
                        q.pop_front();
                    }
                    if q.is_empty() {
                        self.drained.notify_all();
                    }
                    self.written.fetch_add(1, Ordering::Relaxed);
                }
                failed => {
                    if let Ok(Err(err)) = failed {
                        tracing::debug!(error = %err, "lockout write failed; retrying");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(retry) => {}
                        () = cancel.cancelled() => return,
                    }
                }
            }
        }
    }
}

async fn apply(remote: &dyn FleetRemote, w: Write) -> Result<(), crate::store::StoreError> {
    match w {
        Write::Put(l, s) => remote.put_lockout_async(l, s).await,
        Write::Remove(ip) => remote.remove_lockout_async(ip).await.map(drop),
        Write::Publish(e) => remote.publish(e).await,
    }
}
