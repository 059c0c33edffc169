//! What a fleet's shared store offers beyond [`Store`] ([`FleetRemote`]): the calls
//! [`crate::fleet::FleetStore`] makes of it, none of which blocks a caller's thread.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::error::StoreError;
use super::lease::{Asks, Grants, Unspent};
use super::lockout_events::{LockoutEvent, LockoutEvents};
use super::traits::{Store, StoreFuture};
use crate::model::{Lockout, StrikeRecord};

/// What a fleet's shared store offers beyond [`Store`]: connecting in the background, the
/// lockout writes and the stream, all without blocking a caller's thread. The Valkey store
/// implements it; [`crate::fleet::FleetStore`] drives it.
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
    /// Asks the server whether it answers on the connection decisions use (`PING`): the
    /// breaker's own probe, run while it is open whether or not traffic arrives.
    fn ping(&self) -> StoreFuture<'_, ()>;
    /// Publishes an event that has no write of its own (prefix lockouts: the deny list is
    /// written through [`crate::store::RecordStore`]).
    fn publish(&self, event: LockoutEvent) -> StoreFuture<'_, ()>;
    /// Follows the lockout stream until `cancel`, feeding `sink` (reloading it at start and
    /// after a gap that cannot be resumed). Runs on the store's own I/O runtime.
    fn follow(&self, sink: Arc<dyn LockoutEvents>, cancel: CancellationToken);
    /// Why the follower started by [`FleetRemote::follow`] is not following now (`None`: it
    /// is, or it has not started).
    fn follower_error(&self) -> Option<String> {
        None
    }
    /// Whether this store grants leases ([`crate::store::lease`]); the default: it does not,
    /// and every decision is one call.
    fn leases(&self) -> bool {
        false
    }
    /// Gives back `back`, then grants each holder asked in `asks` a lease of up to its `want`
    /// requests (one script per holder, all at once): each holder's first-request outcome and
    /// the requests it granted. `refill`: no request waits on it, and a refusal counts nothing.
    fn lease_async(
        &self,
        _asks: Asks,
        _refill: bool,
        _back: Vec<Unspent>,
    ) -> StoreFuture<'_, Grants> {
        Box::pin(async { Err(StoreError::Open) })
    }
    /// A refill of the background task: [`FleetRemote::lease_async`] with `refill`, on a
    /// connection no decision waits on where the remote has one.
    fn refill_async(&self, asks: Asks) -> StoreFuture<'_, Grants> {
        self.lease_async(asks, true, Vec::new())
    }
    /// [`FleetRemote::lease_async`], waiting for it (the synchronous decision path).
    fn lease(&self, _asks: Asks, _refill: bool, _back: Vec<Unspent>) -> Result<Grants, StoreError> {
        Err(StoreError::Open)
    }
    /// Gives back what leases did not spend, many holders at once.
    fn give_back_async(&self, _back: Vec<Unspent>) -> StoreFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }
    /// Records this host as live at `now_ms` (wall clock) and answers the live host count.
    fn heartbeat_async(&self, _now_ms: u64) -> StoreFuture<'_, u32> {
        Box::pin(async { Ok(1) })
    }
    /// Runs `task` on the store's own I/O runtime (the writer and the connector live there, so
    /// they run whether or not the caller has a runtime).
    fn spawn(&self, task: Pin<Box<dyn Future<Output = ()> + Send + 'static>>);
}
