//! [`Inner`], what a Valkey store's tasks share: the target, the key layout, the scripts, the
//! hasher and the one connection, made once by [`Inner::connect`] (which also loads the scripts
//! and reconciles the fleet secret), and a second one for the work behind the request path. The record and stream operations are `impl Inner` in
//! their own files.

use std::sync::atomic::{AtomicU64, Ordering};

use super::conn::{err, Conn, Target, Topology};
use super::layout::Layout;
use super::{script, secret};
use crate::identity::hash::{IdentityHasher, Namespace};
use crate::store::error::StoreError;
use crate::store::unreadable::Unreadable;

/// What the store's tasks share.
pub(super) struct Inner {
    pub(super) target: Target,
    pub(super) layout: Layout,
    pub(super) scripts: script::Scripts,
    pub(super) lockout_script: redis::Script,
    pub(super) hasher: IdentityHasher,
    /// The fleet secret this process hashes with, to reconcile with Valkey's at connect.
    pub(super) fleet_secret: Option<Vec<u8>>,
    /// Set by the first successful connect; replaced by a later connect when it stopped
    /// answering (see [`Inner::connect`]).
    pub(super) conn: parking_lot::RwLock<Option<(Conn, Topology)>>,
    /// A second connection for the work behind the request path (lease refills, give-backs,
    /// the heartbeat), made with `conn`: a sweep giving back thousands of grants at a slot's
    /// end queued its scripts ahead of every decision on the one connection, and decisions
    /// waited tens of milliseconds behind them (`bench fleet`'s open-loop p99).
    pub(super) behind: parking_lot::RwLock<Option<Conn>>,
    pub(super) connecting: tokio::sync::Mutex<()>,
    pub(super) secret_mismatches: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) host: String,
    /// Records found unreadable (skipped), logged once each and counted.
    pub(super) unreadable: Unreadable,
    /// Why the lockout stream follower is not following now (`None`: it is, or has not
    /// started).
    pub(super) follower_error: parking_lot::Mutex<Option<String>>,
    /// Signalled by each connect that succeeded: the server answers, so a follower waiting
    /// out its backoff tries again at once (a host is not ready until it follows).
    pub(super) answered: tokio::sync::Notify,
}

impl Inner {
    /// The shared connection, or an error at once before the first connect.
    pub(super) fn conn(&self, op: &'static str) -> Result<Conn, StoreError> {
        self.conn
            .read()
            .as_ref()
            .map(|(c, _)| c.clone())
            .ok_or_else(|| {
                err(
                    op,
                    format!("not connected to {} yet", self.target.address()),
                )
            })
    }

    /// The connection for work behind the request path ([`Inner::behind`]); the shared one
    /// until it is made.
    pub(super) fn behind(&self, op: &'static str) -> Result<Conn, StoreError> {
        match self.behind.read().as_ref() {
            Some(c) => Ok(c.clone()),
            None => self.conn(op),
        }
    }

    /// `r`, an error counted toward the store's errors.
    pub(super) fn counted<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if r.is_err() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    pub(super) fn topology(&self) -> Topology {
        self.conn
            .read()
            .as_ref()
            .map_or(Topology::Standalone, |(_, t)| *t)
    }

    pub(super) async fn connect(&self) -> Result<(), StoreError> {
        let _one_at_a_time = self.connecting.lock().await;
        let current = self.conn.read().as_ref().map(|(c, _)| c.clone());
        if let Some(mut c) = current {
            // The connection reconnects by itself after a drop, but a reconnect the server
            // refused (a rotated password) leaves it failing for good with that error: one
            // that does not answer is replaced by a new one, made with the password file as
            // it is now.
            match redis::cmd("PING").query_async::<String>(&mut c).await {
                Ok(_) => {
                    self.answered.notify_waiters();
                    return Ok(());
                }
                Err(e) => {
                    tracing::info!(error = %self.target.explain("ping", &e), "the shared Valkey connection does not answer; making a new one");
                }
            }
        }
        let (mut conn, topology) = self.target.shared().await?;
        // Loaded up front so the first decision does not pay for NOSCRIPT; `invoke` reloads
        // a script by itself if the server forgot it (restart, SCRIPT FLUSH).
        for s in [
            &self.scripts.count,
            &self.scripts.refund,
            &self.scripts.lease_return,
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
        let (behind, _) = self.target.shared().await?;
        // Set only here, under the mutex.
        *self.behind.write() = Some(behind);
        *self.conn.write() = Some((conn, topology));
        self.answered.notify_waiters();
        Ok(())
    }
}
