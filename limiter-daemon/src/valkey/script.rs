//! One counted decision as one script call per holder: [`check_and_count.lua`](check_and_count.lua)
//! with a key and six arguments per row of the window table, and its reply read back as the
//! reference semantics' [`CountOutcome`] ([`crate::store::count::apply`]).
//!
//! A request that also counts against the caller's networks runs the script for the caller
//! and for each network at once (their keys live in different cluster slots), so the decision
//! still costs one round-trip time; [`crate::store::count::combine`] makes the one answer, and
//! when one holder refused what another counted, [`refund.lua`](refund.lua) gives the units
//! back (a second round trip, on those refusals only).

use redis::Value;

use super::conn::{check, Conn};
pub use super::layout::iso8601;
use super::layout::Layout;
use crate::model::{Counts, PerWindow, Shape, WindowKind};
use crate::store::count::{CountOutcome, CountRequest, WindowUse};
use crate::store::error::StoreError;

const SOURCE: &str = include_str!("check_and_count.lua");
const REFUND: &str = include_str!("refund.lua");

/// The count script, hashed once.
pub fn count_script() -> redis::Script {
    redis::Script::new(SOURCE)
}

/// The scripts a decision runs.
pub struct Scripts {
    pub count: redis::Script,
    pub refund: redis::Script,
    /// Gives back what a lease did not spend (`lease_return.lua`).
    pub lease_return: redis::Script,
}

impl Scripts {
    pub fn new() -> Scripts {
        Scripts {
            count: count_script(),
            refund: redis::Script::new(REFUND),
            lease_return: redis::Script::new(include_str!("lease_return.lua")),
        }
    }
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts::new()
    }
}

/// Counts `req` for the caller and, at once, for each of its networks, and combines the
/// answers ([`crate::store::count::combine`]), giving back units a refused request counted.
pub async fn count_all(
    scripts: &Scripts,
    layout: &Layout,
    conn: Conn,
    req: CountRequest,
) -> Result<CountOutcome, StoreError> {
    if !req.has_networks() {
        return count(scripts, layout, conn, req).await;
    }
    let caller = req.caller_only();
    let nets = [req.for_network(0), req.for_network(1)];
    let one = |r: Option<CountRequest>| {
        let conn = conn.clone();
        async move {
            match r {
                Some(r) => count(scripts, layout, conn, r).await.map(Some),
                None => Ok(None),
            }
        }
    };
    let (c, n0, n1) = futures_util::future::join3(
        count(scripts, layout, conn.clone(), caller),
        one(nets[0]),
        one(nets[1]),
    )
    .await;
    let (outcome, refunds) = crate::store::count::combine(&req, c?, [n0?, n1?]);
    let holders = [Some(caller), nets[0], nets[1]];
    for (h, refund) in holders.iter().zip(refunds) {
        if let (Some(h), true) = (h, refund) {
            give_back(&scripts.refund, layout, conn.clone(), h).await?;
        }
    }
    Ok(outcome)
}

/// Takes `req`'s units back out of the budgets it counted (not the burst, which counts every
/// arrival).
async fn give_back(
    script: &redis::Script,
    layout: &Layout,
    mut conn: Conn,
    req: &CountRequest,
) -> Result<(), StoreError> {
    let keys = layout.windows(&req.id, req.now_ms);
    let mut inv = script.prepare_invoke();
    let mut any = false;
    for (kind, limit) in req.limits.iter() {
        let spec = kind.spec();
        if limit.is_some() && !spec.counts_refused {
            inv.key(&keys[kind]).arg(spec.counts.per_request(req.cost));
            any = true;
        }
    }
    if any {
        let _: Value = check("refund", inv.invoke_async(&mut conn).await)?;
    }
    Ok(())
}

/// Counts `req` on `conn`: one decision.
pub async fn count(
    scripts: &Scripts,
    layout: &Layout,
    conn: Conn,
    req: CountRequest,
) -> Result<CountOutcome, StoreError> {
    Ok(grant(scripts, layout, conn, req, 1, false).await?.0)
}

/// Counts `req` on `conn` as a lease of up to `want` requests ([`crate::store::lease::grant`]):
/// the first request's outcome, and the requests granted. `refill`: no request is waiting, so
/// a refusal counts nothing.
pub async fn grant(
    scripts: &Scripts,
    layout: &Layout,
    conn: Conn,
    req: CountRequest,
    want: u32,
    refill: bool,
) -> Result<(CountOutcome, u32), StoreError> {
    // By plain commands, a lease too: a fifth of the script's server time. A lease of k is
    // counted first and what is not granted taken back after, so a request racing it sees up to
    // k units more for that moment; k is at most half of what every host may take of what was
    // left (`lease::size`), so only a holder already near a limit can be refused by it, never
    // admitted past one (docs/fleet.md, the bounds).
    let r = match super::commands::reply(layout, conn.clone(), &req, want, refill).await? {
        Some(r) => r,
        None => by_script(&scripts.count, layout, conn, &req, want, refill).await?,
    };
    let g = clamp(int(&r, 2 + 2 * WindowKind::COUNT));
    let mut o = outcome(&req, &r);
    // The reply counts all `g` requests; the first one's answer is `g − 1` requests earlier.
    if g > 1 {
        for (i, w) in o.uses.0.iter_mut().enumerate() {
            if let Some(w) = w {
                let add = WindowKind::ALL[i].spec().counts.per_request(req.cost);
                w.used = w.used.saturating_sub(add.saturating_mul(g - 1));
            }
        }
    }
    Ok((o, g))
}

/// The count script's reply for `req` (`check_and_count.lua`).
async fn by_script(
    script: &redis::Script,
    layout: &Layout,
    mut conn: Conn,
    req: &CountRequest,
    want: u32,
    refill: bool,
) -> Result<Vec<Value>, StoreError> {
    let mut inv = script.prepare_invoke();
    for k in layout.windows(&req.id, req.now_ms).0 {
        inv.key(k);
    }
    inv.key(layout.first_seen(&req.id));
    inv.arg(req.now_ms)
        .arg(req.cost)
        .arg(iso8601(req.now_ms))
        .arg(WindowKind::Daily.index() + 1)
        .arg(want.max(1))
        .arg(u8::from(refill));
    for (kind, limit) in req.limits.iter() {
        let spec = kind.spec();
        inv.arg(limit.map_or(0, |l| l.max))
            .arg(u8::from(limit.is_some_and(|l| l.refuse)))
            .arg(u8::from(spec.counts == Counts::Requests))
            .arg(spec.span_ms)
            .arg(u8::from(spec.shape == Shape::Sliding))
            .arg(u8::from(spec.counts_refused));
    }
    check("check_and_count", inv.invoke_async(&mut conn).await)
}

/// The script's reply as the reference semantics' outcome.
fn outcome(req: &CountRequest, r: &[Value]) -> CountOutcome {
    let flags = int(r, 1);
    CountOutcome {
        admitted: int(r, 0) == 1,
        refused: PerWindow::from_fn(|k| flags & (1 << k.index()) != 0),
        uses: req.limits.map(|k, limit| {
            limit.map(|l| WindowUse {
                limit: l.max,
                used: clamp(int(r, 2 + 2 * k.index())),
                reset_ms: int(r, 3 + 2 * k.index()),
            })
        }),
        networks: [None; crate::store::count::NET_LEVELS],
    }
}

/// Element `i` of a reply as a count (integers, or numbers the script sent as strings).
fn int(r: &[Value], i: usize) -> u64 {
    let v = match r.get(i) {
        Some(Value::Int(x)) => Some(*x),
        Some(Value::BulkString(b)) => std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()),
        _ => None,
    };
    v.map_or(0, |x| u64::try_from(x).unwrap_or(0))
}

pub fn clamp(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}
