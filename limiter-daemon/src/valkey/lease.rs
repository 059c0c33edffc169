//! Leases on Valkey ([`crate::store::lease`]): a grant for each holder asked (the caller, its
//! networks) in one round trip (the count script with `want`, one call per holder, at once, as
//! a decision is), what a lease did not spend given back (`lease_return.lua`, one call per holder, many at once on
//! the multiplexed connection), and the fleet's live host count (a sorted set of heartbeats).

use redis::Value;

use super::conn::{check, Conn};
use super::layout::Layout;
use super::script::{grant, iso8601, Scripts};
use crate::model::WindowKind;
use crate::store::count::{CountRequest, NET_LEVELS};
use crate::store::error::StoreError;
use crate::store::lease::{Asks, Grants, Unspent};

/// A host counts as live this long after its last heartbeat.
pub const HOST_TTL_MS: u64 = 10_000;

/// Leases each holder asked in `asks` up to its `want` requests, one count script per holder
/// (each in its own slot), all in flight at once: one round trip. Each holder's answer stands
/// alone; the leases layer combines them into the request's decision.
pub async fn lease_all(
    scripts: &Scripts,
    layout: &Layout,
    conn: Conn,
    asks: Asks,
    refill: bool,
) -> Result<Grants, StoreError> {
    let one = |a: Option<(CountRequest, u32)>| {
        let conn = conn.clone();
        async move {
            match a {
                Some((r, want)) => grant(scripts, layout, conn, r, want, refill)
                    .await
                    .map(Some),
                None => Ok(None),
            }
        }
    };
    let (c, n0, n1) = futures_util::future::join3(one(asks[0]), one(asks[1]), one(asks[2])).await;
    Ok([c?, n0?, n1?])
}

/// Gives back every `Unspent`, one script call per holder, all at once.
pub async fn give_back(
    scripts: &Scripts,
    layout: &Layout,
    conn: Conn,
    items: &[Unspent],
) -> Result<(), StoreError> {
    let calls = items
        .iter()
        .filter(|u| WindowKind::ALL.iter().any(|k| u.units(*k) > 0))
        .map(|u| {
            let mut conn = conn.clone();
            let keys = layout.windows(&u.id, u.at_ms);
            let mut inv = scripts.lease_return.prepare_invoke();
            for k in keys.0 {
                inv.key(k);
            }
            inv.key(layout.first_seen(&u.id));
            let iso = iso8601(u.at_ms);
            inv.arg(u.at_ms / crate::store::windows::BURST_SLOT_MS);
            for k in WindowKind::ALL {
                inv.arg(u.units(k));
            }
            inv.arg(&iso[..10]);
            async move {
                let r: Result<Value, _> = inv.invoke_async(&mut conn).await;
                check("lease_return", r).map(drop)
            }
        });
    for r in futures_util::future::join_all(calls).await {
        r?;
    }
    Ok(())
}

/// Records this host's heartbeat at `now_ms` and answers how many hosts beat within
/// [`HOST_TTL_MS`] (at least 1: this one).
pub async fn heartbeat(
    layout: &Layout,
    mut conn: Conn,
    host: &str,
    now_ms: u64,
) -> Result<u32, StoreError> {
    let key = layout.name("hosts");
    let (_, _, n): (Value, Value, u64) = check(
        "heartbeat",
        redis::pipe()
            .cmd("ZADD")
            .arg(&key)
            .arg(now_ms)
            .arg(host)
            .cmd("ZREMRANGEBYSCORE")
            .arg(&key)
            .arg("-inf")
            .arg(now_ms.saturating_sub(HOST_TTL_MS))
            .cmd("ZCARD")
            .arg(&key)
            .query_async(&mut conn)
            .await,
    )?;
    Ok(u32::try_from(n).unwrap_or(u32::MAX).max(1))
}

const _: () = assert!(
    NET_LEVELS == 2,
    "lease_all joins the caller and two networks"
);
