//! The fleet's lockout stream, `<prefix>lockouts`: every lockout made or lifted on any host is
//! appended (`XADD … MAXLEN ~ 10000`, one field `event` holding the JSON of a
//! [`LockoutEvent`]), and every host follows it ([`ValkeyStore::follow`]) with a blocking
//! `XREAD` on a connection of its own (a blocked read must not hold up the shared one).
//!
//! The follower resumes from its last ID after a reconnect. When it cannot (at start; the
//! stream lost its data; its last ID was trimmed away) it reloads the whole set of active
//! lockouts first, then reads on from the stream's tail as it was before the reload, so no
//! event made during the reload is missed (applying one twice is harmless).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use redis::streams::{StreamRangeReply, StreamReadOptions, StreamReadReply};
use tokio_util::sync::CancellationToken;

use super::conn::{check, err, Conn};
use super::inner::Inner;
use super::valkey_store::ValkeyStore;
use crate::model::{Lockout, StrikeRecord};
use crate::store::error::StoreError;
use crate::store::lockout_events::{LockoutEvent, LockoutEvents};
use crate::store::unreadable::{check_event, RecordKind, UnreadableRecord};

/// Entries the stream keeps (approximately: Valkey trims whole nodes).
pub const MAX_LEN: usize = 10_000;
/// How long one `XREAD` blocks; the follower's connection times out a little after.
const BLOCK_MS: usize = 1000;
const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// At most this long between attempts: `/readyz` says not following until one succeeds, and a
/// host back from an outage must be ready again within a probe interval or so.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// A stream entry ID, ordered as Valkey orders them.
fn parse_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

impl Inner {
    pub(super) async fn publish(&self, event: &LockoutEvent) -> Result<(), StoreError> {
        let body = serde_json::to_string(event).map_err(|e| err("publish", e.to_string()))?;
        let mut c = self.conn("publish")?;
        let _id: String = check(
            "publish",
            redis::cmd("XADD")
                .arg(self.layout.stream())
                .arg("MAXLEN")
                .arg("~")
                .arg(MAX_LEN)
                .arg("*")
                .arg("event")
                .arg(body)
                .query_async(&mut c)
                .await,
        )?;
        Ok(())
    }

    /// The first (`first`) or last entry's ID, `None` when the stream is empty or missing.
    async fn end_id(&self, conn: &mut Conn, first: bool) -> Result<Option<String>, StoreError> {
        let key = self.layout.stream();
        let mut cmd = redis::cmd(if first { "XRANGE" } else { "XREVRANGE" });
        cmd.arg(&key);
        if first {
            cmd.arg("-").arg("+");
        } else {
            cmd.arg("+").arg("-");
        }
        let r: StreamRangeReply = check("follow", cmd.arg("COUNT").arg(1).query_async(conn).await)?;
        Ok(r.ids.into_iter().next().map(|e| e.id))
    }

    /// Follows until cancelled or an error (the caller reconnects). `last` is the ID to resume
    /// from (`None`: reload first). `followed` is set once a read of the stream succeeded.
    async fn follow_on(
        &self,
        conn: &mut Conn,
        sink: &dyn LockoutEvents,
        last: &mut Option<String>,
        followed: &mut bool,
        cancel: &CancellationToken,
    ) -> Result<(), StoreError> {
        if let Some(id) = last.as_deref() {
            let first = self.end_id(conn, true).await?;
            let gap = match first.as_deref().and_then(parse_id) {
                // Empty or missing: the server lost its data (or was flushed).
                None => true,
                Some(f) => parse_id(id).is_none_or(|l| f > l),
            };
            if gap {
                tracing::warn!(event = "lockout_stream_gap", last = %id, "cannot resume the lockout stream; reloading the active lockouts");
                *last = None;
            }
        }
        if last.is_none() {
            let tail = self
                .end_id(conn, false)
                .await?
                .unwrap_or_else(|| "0-0".into());
            sink.reload(self.active_lockouts().await?);
            *last = Some(tail);
        }
        let key = self.layout.stream();
        let opts = StreamReadOptions::default().block(BLOCK_MS).count(500);
        // Resumed (or reloaded) from a stream this connection just read: following again from
        // now, not from the end of the first blocking read (a second later on a quiet stream).
        *self.follower_error.lock() = None;
        loop {
            let from = last.clone().unwrap_or_else(|| "0-0".into());
            let mut cmd = redis::cmd("XREAD");
            cmd.arg(&opts).arg("STREAMS").arg(&key).arg(&from);
            let read = tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                r = cmd.query_async::<Option<StreamReadReply>>(conn) => check("follow", r)?,
            };
            *followed = true;
            for k in read.map(|r| r.keys).unwrap_or_default() {
                for entry in k.ids {
                    match self.event(&key, &entry) {
                        Ok(event) => sink.apply(&event),
                        // One bad entry is skipped; the next ones apply.
                        Err(r) => self.unreadable.found(&r),
                    }
                    *last = Some(entry.id);
                }
            }
        }
    }
}

impl Inner {
    /// One stream entry's event, read and within bounds, or the entry as skipped (by its ID).
    fn event(
        &self,
        key: &str,
        entry: &redis::streams::StreamId,
    ) -> Result<LockoutEvent, UnreadableRecord> {
        let skipped = |error: String| UnreadableRecord {
            kind: RecordKind::Stream,
            key: key.to_string(),
            field: Some(entry.id.clone()),
            id: None,
            error,
        };
        let body = entry
            .get::<Vec<u8>>("event")
            .ok_or_else(|| skipped("no `event` field".into()))?;
        let event: LockoutEvent =
            serde_json::from_slice(&body).map_err(|e| skipped(e.to_string()))?;
        check_event(&event).map_err(skipped)?;
        Ok(event)
    }
}

impl ValkeyStore {
    /// Appends a lockout event (net lockouts; address lockouts go through
    /// [`Self::put_lockout_async`] and [`Self::remove_lockout_async`]).
    pub async fn publish(&self, event: &LockoutEvent) -> Result<(), StoreError> {
        self.inner.publish(event).await
    }

    /// Writes `lockout` and `strikes` (the longer lockout and the higher strike count win, in
    /// one script) and appends a [`LockoutEvent::Locked`] with the lockout now in force, which
    /// it returns.
    pub async fn put_lockout_async(
        &self,
        lockout: &Lockout,
        strikes: Option<&StrikeRecord>,
        host: &str,
    ) -> Result<Lockout, StoreError> {
        self.inner.put_lockout(lockout, strikes, host).await
    }

    /// Deletes `ip`'s lockout (returned if there was one) and appends a
    /// [`LockoutEvent::Lifted`].
    pub async fn remove_lockout_async(
        &self,
        ip: IpAddr,
        host: &str,
    ) -> Result<Option<Lockout>, StoreError> {
        self.inner.remove_lockout(ip, host).await
    }

    /// Every lockout Valkey holds, with its strikes.
    pub async fn active_lockouts(
        &self,
    ) -> Result<Vec<(Lockout, Option<StrikeRecord>)>, StoreError> {
        self.inner.active_lockouts().await
    }

    /// Follows the lockout stream into `sink` on the store's runtime, on a connection of its
    /// own, until `cancel`: reloads at start and after a gap, resumes after a reconnect,
    /// reconnects with backoff, cut short when a connect of the shared connection succeeds
    /// (the server answers again). The backoff grows while no read succeeds, also when the
    /// connection itself is made (an error after connecting must not make it a tight loop);
    /// meanwhile [`ValkeyStore::follower_error`] says why it is not following. `sink` runs on the store's I/O thread: it must not call the
    /// store's blocking methods (they fail there rather than wait on themselves).
    pub fn follow(
        &self,
        sink: Arc<dyn LockoutEvents>,
        cancel: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let inner = self.inner.clone();
        self.handle().spawn(async move {
            let mut last = None;
            let mut backoff = MIN_BACKOFF;
            let mut failing = false;
            while !cancel.is_cancelled() {
                let timeout = Duration::from_millis(BLOCK_MS as u64) + Duration::from_secs(2);
                let mut followed = false;
                let r = match inner.target.own(timeout).await {
                    Ok(mut conn) => {
                        inner
                            .follow_on(&mut conn, &*sink, &mut last, &mut followed, &cancel)
                            .await
                    }
                    Err(e) => Err(e),
                };
                if followed {
                    // It followed until this error: a fresh start.
                    backoff = MIN_BACKOFF;
                    failing = false;
                }
                match r {
                    Ok(()) => return,
                    Err(e) => {
                        if !failing {
                            tracing::warn!(event = "lockout_stream_not_following", error = %e, "lockout stream follower: reconnecting (with backoff, up to 1 s, until it follows again)");
                        }
                        failing = true;
                        *inner.follower_error.lock() = Some(e.to_string());
                    }
                }
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                    () = inner.answered.notified() => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_order_as_valkey_orders_them() {
        assert!(parse_id("1700000000000-2") > parse_id("1700000000000-1"));
        assert!(parse_id("1700000000001-0") > parse_id("1700000000000-9"));
        assert_eq!(parse_id("junk"), None);
    }
}
