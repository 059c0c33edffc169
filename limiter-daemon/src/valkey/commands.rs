//! One holder's check-and-count as plain commands in one pipeline, not a Lua script: how a
//! decision, and a lease of up to `want` requests, is counted on Valkey.
//!
//! Why: a script call costs the server about five times what the same work costs as plain
//! commands (callgrind on valkey-server 8.1: 222k instructions per `check_and_count.lua` call
//! against 42k for HINCRBY, PEXPIRE, HGETALL and two INCRBY + PEXPIRE pipelined; docs/fleet.md),
//! and a fleet's decisions per second on one Valkey are that server's CPU divided by it.
//!
//! How it stays exact: every window is **incremented first and checked after** (the increment's
//! reply, and the burst's slots read back after it), so a request sees everything counted
//! before it, plus whatever raced it; what a refused request (or the part of a lease not
//! granted) must not count is taken back in a second pipeline before the answer is given. A
//! request is admitted only when the count including its own units is within the limit, and
//! admitted units are never taken back, so the admitted stay within every limit fleet-wide,
//! as with the script. Requests racing one another may see each other's units before they are
//! taken back: that can refuse one that the script would have admitted (under-admission of
//! at most the requests in flight at once), never the reverse.
//!
//! The reply has the script's shape (`check_and_count.lua`: admitted, refusal flags, used and
//! reset per window, then the requests granted), so [`super::script`] reads both alike, and
//! `tests/engine_valkey.rs` runs the reference semantics' random trace through both.
//!
//! One case is left to the script: a daily count whose `:ts` names another UTC day (its key
//! carries no day, and is started over only by reading `:ts` first). Those units are taken
//! back and the script counts the request, once a day per identity at most.

use redis::Value;

use super::conn::{check, Conn};
use super::layout::Layout;
use crate::model::{Shape, WindowKind};
use crate::store::count::CountRequest;
use crate::store::error::StoreError;
use crate::store::windows::BURST_SLOT_MS;

/// The most a burst slot holds, as the embedded store's u16 slots (refused requests count
/// there too, so a flood can reach it).
const SLOT_MAX: i64 = 65_535;

/// One window as this pipeline counts it.
struct Counted {
    kind: WindowKind,
    key: String,
    limit: i64,
    refuses: bool,
    /// What one request adds.
    add: i64,
    /// Added up front: `want` requests' worth.
    added: i64,
    /// Index of the reply holding the count after the increment (a fixed window's INCRBY,
    /// a sliding window's HINCRBY).
    at: usize,
}

/// Counts `req` as a lease of up to `want` requests (1: one decision) by plain commands and
/// answers as `check_and_count.lua` would; `None` when the daily count is another day's (the
/// units added are taken back first: the caller runs the script instead).
pub async fn reply(
    layout: &Layout,
    mut conn: Conn,
    req: &CountRequest,
    want: u32,
    refill: bool,
) -> Result<Option<Vec<Value>>, StoreError> {
    let now = i64::try_from(req.now_ms).unwrap_or(i64::MAX);
    let want = i64::from(want.max(1));
    let slot = now / BURST_SLOT_MS as i64;
    let keys = layout.windows(&req.id, req.now_ms);
    let iso = super::layout::iso8601(req.now_ms);
    let mut pipe = redis::pipe();
    let mut n = 0usize;
    let mut counted: Vec<Counted> = Vec::with_capacity(WindowKind::COUNT);
    let mut ts_at = None;
    for (kind, limit) in req.limits.iter() {
        let Some(l) = limit.filter(|l| l.max > 0) else {
            continue;
        };
        let spec = kind.spec();
        let add = i64::from(spec.counts.per_request(req.cost));
        let added = add * want;
        let key = keys[kind].clone();
        let span = i64::try_from(spec.span_ms).unwrap_or(i64::MAX);
        let at;
        if spec.shape == Shape::Sliding {
            pipe.cmd("HINCRBY").arg(&key).arg(slot).arg(added);
            at = n;
            pipe.cmd("PEXPIRE").arg(&key).arg(span + 10_000).ignore();
            pipe.cmd("HGETALL").arg(&key);
            n += 2;
        } else {
            let ttl = rollover(now, span) + 60_000;
            if kind == WindowKind::Daily {
                let ts_key = layout.first_seen(&req.id);
                pipe.cmd("GET").arg(&ts_key);
                ts_at = Some(n);
                n += 1;
                // The first count of the day names when the identity was first seen; NX keeps
                // an earlier request's (another day's is caught below and left to the script).
                pipe.cmd("SET")
                    .arg(&ts_key)
                    .arg(&iso)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl)
                    .ignore();
            }
            pipe.cmd("INCRBY").arg(&key).arg(added);
            at = n;
            n += 1;
            pipe.cmd("PEXPIRE").arg(&key).arg(ttl).ignore();
        }
        counted.push(Counted {
            kind,
            key,
            limit: i64::from(l.max),
            refuses: l.refuse,
            add,
            added,
            at,
        });
    }
    let r: Vec<Value> = if n == 0 {
        Vec::new()
    } else {
        check("count", pipe.query_async(&mut conn).await)?
    };
    let stale = ts_at
        .and_then(|i| text(r.get(i)))
        .is_some_and(|ts| ts.get(..10) != iso.get(..10));

    // What each window held before this request (and whatever raced it), and the burst's
    // oldest counted slot.
    let mut before = [0i64; WindowKind::COUNT];
    let mut oldest = [-1i64; WindowKind::COUNT];
    let mut held = [0i64; WindowKind::COUNT];
    let mut gone: Vec<(String, Vec<i64>)> = Vec::new();
    for c in &counted {
        let i = c.kind.index();
        let after = int(r.get(c.at));
        held[i] = after;
        if c.kind.spec().shape == Shape::Sliding {
            let lo = slot
                - i64::try_from(c.kind.spec().span_ms).unwrap_or(i64::MAX) / BURST_SLOT_MS as i64;
            let read = slots(r.get(c.at + 1), lo, slot, c.added);
            before[i] = read.sum - c.added;
            oldest[i] = read.oldest;
            if !read.stale.is_empty() {
                gone.push((c.key.clone(), read.stale));
            }
        } else {
            before[i] = after - c.added;
        }
    }
    let mut admitted = true;
    let mut flags = 0i64;
    let mut g = want;
    for c in counted.iter().filter(|c| c.refuses) {
        let b = before[c.kind.index()];
        if b + c.add > c.limit {
            admitted = false;
            flags |= 1 << c.kind.index();
        }
        g = g.min((c.limit - b).div_euclid(c.add.max(1)));
    }
    if !admitted {
        g = 0;
    }

    // What each window keeps: g requests' worth when admitted; a refused request's arrival
    // where refused requests count (not a refill's: no request arrived); otherwise nothing.
    let mut back = redis::pipe();
    // Slots past the window go with the take-backs (the script drops them as it reads): one
    // more round trip at most once a slot for a busy identity.
    let mut any_back = !gone.is_empty();
    for (key, fields) in &gone {
        back.cmd("HDEL").arg(key).arg(fields).ignore();
    }
    let mut used = [0i64; WindowKind::COUNT];
    for c in &counted {
        let i = c.kind.index();
        let spec = c.kind.spec();
        let keep = if stale {
            0
        } else if admitted {
            c.add * g
        } else if spec.counts_refused && !refill {
            c.add
        } else {
            0
        };
        let take = c.added - keep;
        let mut over = 0;
        if spec.shape == Shape::Sliding {
            if take != 0 {
                back.cmd("HINCRBY")
                    .arg(&c.key)
                    .arg(slot)
                    .arg(-take)
                    .ignore();
                any_back = true;
            }
            over = (held[i] - take - SLOT_MAX).max(0);
            if over > 0 {
                back.cmd("HSET")
                    .arg(&c.key)
                    .arg(slot)
                    .arg(SLOT_MAX)
                    .ignore();
                any_back = true;
            }
            if keep > 0 && oldest[i] < 0 {
                oldest[i] = slot;
            }
        } else if take != 0 {
            back.cmd("DECRBY").arg(&c.key).arg(take).ignore();
            any_back = true;
        }
        used[i] = before[i] + keep - over;
    }
    if any_back {
        let _: Value = check("count", back.query_async(&mut conn).await)?;
    }
    if stale {
        return Ok(None);
    }

    let mut out = Vec::with_capacity(3 + 2 * WindowKind::COUNT);
    out.push(Value::Int(i64::from(admitted)));
    out.push(Value::Int(flags));
    for kind in WindowKind::ALL {
        let spec = kind.spec();
        let i = kind.index();
        let span = i64::try_from(spec.span_ms).unwrap_or(i64::MAX);
        let reset = if spec.shape == Shape::Sliding {
            if oldest[i] >= 0 {
                ((oldest[i] + span / BURST_SLOT_MS as i64 + 1) * BURST_SLOT_MS as i64 - now).max(1)
            } else {
                span
            }
        } else {
            rollover(now, span)
        };
        out.push(Value::Int(used[i]));
        out.push(Value::Int(reset));
    }
    out.push(Value::Int(g));
    Ok(Some(out))
}

/// Milliseconds from `now` to the end of its `span`-long fixed window.
fn rollover(now: i64, span: i64) -> i64 {
    (now / span + 1) * span - now
}

/// A burst hash as read back after this request's increment.
struct Slots {
    /// The count over slots `lo..=slot`.
    sum: i64,
    /// The oldest of those slots holding a count besides this request's (-1: none).
    oldest: i64,
    /// Slots before `lo`: past the window.
    stale: Vec<i64>,
}

/// Reads an HGETALL of the burst hash made after this request added `added` to `slot`.
fn slots(v: Option<&Value>, lo: i64, slot: i64, added: i64) -> Slots {
    let (mut sum, mut oldest, mut stale) = (0i64, -1i64, Vec::new());
    let mut pair = |field: i64, count: i64| {
        if field < lo {
            stale.push(field);
            return;
        }
        if field > slot {
            return;
        }
        sum += count;
        let before = if field == slot { count - added } else { count };
        if before > 0 && (oldest < 0 || field < oldest) {
            oldest = field;
        }
    };
    match v {
        Some(Value::Map(m)) => {
            for (f, c) in m {
                if let (Some(f), Some(c)) = (num(f), num(c)) {
                    pair(f, c);
                }
            }
        }
        Some(Value::Array(a)) => {
            for fc in a.chunks_exact(2) {
                if let (Some(f), Some(c)) = (num(&fc[0]), num(&fc[1])) {
                    pair(f, c);
                }
            }
        }
        _ => {}
    }
    Slots { sum, oldest, stale }
}

fn num(v: &Value) -> Option<i64> {
    match v {
        Value::Int(x) => Some(*x),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn int(v: Option<&Value>) -> i64 {
    v.and_then(num).unwrap_or(0)
}

fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}
