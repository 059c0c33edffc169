//! The vocabulary of a fleet sharing one remote store: lockout events as every host sees them
//! (made or lifted on some host, carried on the store's lockout stream), and the sink each
//! host feeds them into (its lockout replica, its kernel maps).

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::traits::{Store, StoreFuture};
use crate::model::{Lockout, StrikeRecord};

/// One entry of the lockout stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum LockoutEvent {
    /// An address lockout made (or lengthened), with the strike record it came with.
    Locked {
        lockout: Lockout,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        strikes: Option<StrikeRecord>,
        host: String,
    },
    /// An address lockout lifted.
    Lifted { ip: IpAddr, host: String },
    /// A prefix lockout (a deny-list entry with a deadline) made.
    NetLocked {
        net: IpNet,
        until_ms: u64,
        reason: String,
        host: String,
    },
    /// A prefix lockout lifted.
    NetLifted { net: IpNet, host: String },
}

impl LockoutEvent {
    /// The host that made the event.
    pub fn host(&self) -> &str {
        match self {
            LockoutEvent::Locked { host, .. }
            | LockoutEvent::Lifted { host, .. }
            | LockoutEvent::NetLocked { host, .. }
            | LockoutEvent::NetLifted { host, .. } => host,
        }
    }
}

/// What a fleet store did since start (metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// Counted decisions that went to the shared store.
    pub remote_calls: u64,
    /// Of those, the ones past `decision_timeout` (counted locally instead).
    pub timeouts: u64,
    /// Decisions answered from the over-limit cache, without a round trip.
    pub over_limit_answers: u64,
    /// Lockout events from other hosts applied here.
    pub events_applied: u64,
    /// Lockout writes waiting for the store.
    pub writes_queued: u64,
    /// Lockout writes dropped because the queue was full.
    pub writes_dropped: u64,
}

/// Where a host applies what the stream carries.
pub trait LockoutEvents: Send + Sync + 'static {
    /// One event, in stream order.
    fn apply(&self, event: &LockoutEvent);
    /// The whole set of active address lockouts (at start, and after a gap in the stream that
    /// could not be resumed): replaces what was known.
    fn reload(&self, active: Vec<(Lockout, Option<StrikeRecord>)>);
}

/// What a fleet's shared store offers beyond [`Store`]: connecting in the background, the
/// lockout writes and the stream, all without blocking a caller's thread. The Valkey store
/// implements it; [`crate::store::remote::FleetStore`] drives it.
pub trait FleetRemote: Store {
    /// This host's name in the events it publishes.
    fn host(&self) -> &str;
    /// Connects (or reconnects): establishes the connections, loads scripts, settles the
    /// hashing secret. Calls made before a connect has succeeded fail at once.
    fn connect(&self) -> StoreFuture<'_, ()>;
    /// Writes `lockout` (the longer lockout wins over one already there) and its strikes, and
    /// publishes [`LockoutEvent::Locked`].
    fn put_lockout_async(
        &self,
        lockout: Lockout,
        strikes: Option<StrikeRecord>,
    ) -> StoreFuture<'_, ()>;
    /// Lifts `ip`'s lockout and publishes [`LockoutEvent::Lifted`].
    fn remove_lockout_async(&self, ip: IpAddr) -> StoreFuture<'_, Option<Lockout>>;
    /// Publishes an event that has no write of its own (prefix lockouts: the deny list is
    /// written through [`crate::store::RecordStore`]).
    fn publish(&self, event: LockoutEvent) -> StoreFuture<'_, ()>;
    /// Follows the lockout stream until `cancel`, feeding `sink` (reloading it at start and
    /// after a gap that cannot be resumed). Runs on the store's own I/O runtime.
    fn follow(&self, sink: Arc<dyn LockoutEvents>, cancel: CancellationToken);
    /// Runs `task` on the store's own I/O runtime (the writer and the connector live there, so
    /// they run whether or not the caller has a runtime).
    fn spawn(&self, task: Pin<Box<dyn Future<Output = ()> + Send + 'static>>);
}
