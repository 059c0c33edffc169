//! Leases on Valkey ([`crate::store::lease`]): a grant for the caller and each of its networks
//! in one round trip (the count script with `want`, one call per holder, at once, as a decision
//! is), the grants of the holders made equal (each gives back what exceeds the smallest), what
//! a lease did not spend given back (`lease_return.lua`, one call per holder, many at once on
//! the multiplexed connection), and the fleet's live host count (a sorted set of heartbeats).

use redis::Value;

use super::conn::{check, Conn};
use super::layout::Layout;
use super::script::{grant, iso8601, Scripts};
use crate::model::WindowKind;
use crate::store::count::{combine, CountOutcome, CountRequest, NET_LEVELS};
use crate::store::error::StoreError;
use crate::store::lease::Unspent;

/// A host counts as live this long after its last heartbeat.
pub const HOST_TTL_MS: u64 = 10_000;

/// Leases up to `want` requests of `req` for the caller and its networks: the combined first
/// request's outcome ([`combine`]) and `g`, the requests granted to all holders alike (0:
/// refused, counted as one decision counts a refusal).
pub async fn lease_all(
    scripts: &Scripts,
    layout: &Layout,
    conn: Conn,
    req: CountRequest,
    want: u32,
    refill: bool,
) -> Result<(CountOutcome, u32), StoreError> {
    if !req.has_networks() {
        return grant(&scripts.count, layout, conn, req, want, refill).await;
    }
    let caller = req.caller_only();
    let nets = [req.for_network(0), req.for_network(1)];
    let one = |r: Option<CountRequest>| {
        let conn = conn.clone();
        async move {
            match r {
                Some(r) => grant(&scripts.count, layout, conn, r, want, refill)
                    .await
                    .map(Some),
                None => Ok(None),
            }
        }
    };
    let (c, n0, n1) = futures_util::future::join3(
        grant(&scripts.count, layout, conn.clone(), caller, want, refill),
        one(nets[0]),
        one(nets[1]),
    )
    .await;
    let (c, n0, n1) = (c?, n0?, n1?);
    let grants = [Some(c.1), n0.map(|x| x.1), n1.map(|x| x.1)];
    let g = grants.iter().flatten().copied().min().unwrap_or(0);
    let (outcome, _) = combine(&req, c.0, [n0.map(|x| x.0), n1.map(|x| x.0)]);
    // Each holder keeps `g` requests (a refusal: the one arrival its burst counts; a refill
    // refused counted nothing) and gives back the rest.
    let holders = [Some(caller), nets[0], nets[1]];
    let mut back = Vec::new();
    for (h, granted) in holders.iter().zip(grants) {
        let (Some(h), Some(granted)) = (h, granted) else {
            continue;
        };
        if granted == 0 {
            continue;
        }
        let keep_burst = if refill { g } else { g.max(1) };
        back.push(Unspent::one(
            h.id,
            h,
            h.limits,
            granted - keep_burst.min(granted),
            granted - g,
        ));
    }
    give_back(scripts, layout, conn, &back).await?;
    Ok((outcome, g))
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
