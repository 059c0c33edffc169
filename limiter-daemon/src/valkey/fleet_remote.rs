//! The Valkey store as a fleet's shared store ([`FleetRemote`]): what
//! [`crate::fleet::FleetStore`] drives, mapped onto the store's own async calls, each
//! run on the store's I/O runtime.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::lease;
use super::valkey_store::ValkeyStore;
use crate::model::{Lockout, StrikeRecord};
use crate::store::error::StoreError;
use crate::store::fleet_remote::FleetRemote;
use crate::store::lease::{Asks, Grants, Unspent};
use crate::store::lockout_events::{LockoutEvent, LockoutEvents};
use crate::store::StoreFuture;

impl FleetRemote for ValkeyStore {
    fn host(&self) -> &str {
        ValkeyStore::host(self)
    }

    fn connect(&self) -> StoreFuture<'_, ()> {
        Box::pin(ValkeyStore::connect(self))
    }

    fn ping(&self) -> StoreFuture<'_, ()> {
        let inner = &self.inner;
        Box::pin(async move {
            let mut conn = inner.conn("ping")?;
            redis::cmd("PING")
                .query_async::<String>(&mut conn)
                .await
                .map(drop)
                .map_err(|e| inner.target.explain("ping", &e))
        })
    }

    fn put_lockout_async(
        &self,
        lockout: Lockout,
        strikes: Option<StrikeRecord>,
    ) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            ValkeyStore::put_lockout_async(self, &lockout, strikes.as_ref(), self.host())
                .await
                .map(drop)
        })
    }

    fn remove_lockout_async(&self, ip: IpAddr) -> StoreFuture<'_, Option<Lockout>> {
        Box::pin(ValkeyStore::remove_lockout_async(self, ip, self.host()))
    }

    fn publish(&self, event: LockoutEvent) -> StoreFuture<'_, ()> {
        Box::pin(async move { ValkeyStore::publish(self, &event).await })
    }

    fn follow(&self, sink: Arc<dyn LockoutEvents>, cancel: CancellationToken) {
        // The follower ends with `cancel`; nothing waits on its handle.
        drop(ValkeyStore::follow(self, sink, cancel));
    }

    fn follower_error(&self) -> Option<String> {
        ValkeyStore::follower_error(self)
    }

    fn leases(&self) -> bool {
        true
    }

    fn lease_async(&self, asks: Asks, refill: bool, back: Vec<Unspent>) -> StoreFuture<'_, Grants> {
        let inner = &self.inner;
        Box::pin(async move {
            let r = async {
                let conn = inner.conn("lease")?;
                if !back.is_empty() {
                    lease::give_back(&inner.scripts, &inner.layout, conn.clone(), &back).await?;
                }
                lease::lease_all(&inner.scripts, &inner.layout, conn, asks, refill).await
            }
            .await;
            inner.counted(r)
        })
    }

    fn lease(&self, asks: Asks, refill: bool, back: Vec<Unspent>) -> Result<Grants, StoreError> {
        self.run_lease(asks, refill, back)
    }

    fn refill_async(&self, asks: Asks) -> StoreFuture<'_, Grants> {
        let inner = &self.inner;
        Box::pin(async move {
            let r = async {
                let conn = inner.behind("lease")?;
                lease::lease_all(&inner.scripts, &inner.layout, conn, asks, true).await
            }
            .await;
            inner.counted(r)
        })
    }

    fn give_back_async(&self, back: Vec<Unspent>) -> StoreFuture<'_, ()> {
        let inner = &self.inner;
        Box::pin(async move {
            let conn = inner.behind("lease_return")?;
            lease::give_back(&inner.scripts, &inner.layout, conn, &back).await
        })
    }

    fn heartbeat_async(&self, now_ms: u64) -> StoreFuture<'_, u32> {
        let inner = &self.inner;
        Box::pin(async move {
            let conn = inner.behind("heartbeat")?;
            lease::heartbeat(&inner.layout, conn, &inner.host, now_ms).await
        })
    }

    fn spawn(&self, task: Pin<Box<dyn Future<Output = ()> + Send + 'static>>) {
        drop(self.handle().spawn(task));
    }
}
