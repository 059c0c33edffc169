//! `/admin/v1/lockouts`: list (paginated), add (an address into the lockout map, a CIDR into
//! the deny trie with a deadline, an AS number as the CIDRs of its ranges,
//! [`crate::engine::asn_lockouts`]) and lift, each in the store and the kernel at once. A lift
//! of an address with `?forgetStrikes=true` also forgets the strikes it holds, so its next
//! burst locks it at level 1 again instead of going on escalating.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use ipnet::IpNet;
use serde::Deserialize;
use serde_json::{json, Value};

use super::blocking::blocking;
use super::time_text::{rfc3339, secs_left};
use crate::admin::body::JsonBody;
use crate::admin::path::AdminPath;
use crate::admin::problem::AdminError;
use crate::admin::state::AdminState;
use crate::engine::lockouts::{LockTarget, LockoutItem};
use limiter_common::args::{net_text, parse_asn, parse_cidr, parse_duration};

/// Page size when `limit` is absent, and the largest accepted.
pub const DEFAULT_PAGE: usize = 100;
pub const MAX_PAGE: usize = 1000;

pub fn item_json(i: &LockoutItem, now_ms: u64) -> Value {
    json!({
        "ip": net_text(&i.net),
        "until": rfc3339(i.until_ms),
        "remainingSecs": secs_left(i.until_ms, now_ms),
        "level": i.level,
        "reason": i.reason,
        "source": i.source,
        "cause": i.cause.as_str(),
    })
}

/// `ip` as a lockout target: an address or a CIDR within the allowed prefixes.
pub fn target(field: &str, text: &str) -> Result<LockTarget, AdminError> {
    let net = parse_cidr(text).map_err(|m| AdminError::bad(field, m))?;
    LockTarget::of(net).map_err(|e| AdminError::engine(e, field))
}

pub async fn list(
    State(state): State<AdminState>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, AdminError> {
    if let Some(k) = q.keys().find(|k| *k != "limit" && *k != "cursor") {
        return Err(AdminError::bad(
            k,
            "unknown query parameter (use `limit` and `cursor`)",
        ));
    }
    let limit = match q.get("limit") {
        None => DEFAULT_PAGE,
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (1..=MAX_PAGE).contains(&n) => n,
            _ => {
                return Err(AdminError::bad(
                    "limit",
                    format!("{s:?}: expected a whole number from 1 to {MAX_PAGE}"),
                ))
            }
        },
    };
    let cursor = match q.get("cursor") {
        None => None,
        Some(s) => Some(s.parse::<IpNet>().map_err(|_| {
            AdminError::bad(
                "cursor",
                format!("{s:?} is not a cursor (pass `nextCursor` back as it was)"),
            )
        })?),
    };
    let (items, now) = blocking(&state, |e| (e.lockouts().all(), e.clock().now_ms())).await?;
    let items = items.map_err(|e| AdminError::engine(e, "ip"))?;
    let after = |i: &LockoutItem| match cursor {
        None => true,
        Some(c) => (i.net.addr(), i.net.prefix_len()) > (c.addr(), c.prefix_len()),
    };
    let page: Vec<&LockoutItem> = items.iter().filter(|i| after(i)).take(limit + 1).collect();
    let next = (page.len() > limit).then(|| page[limit - 1].net.to_string());
    let out: Vec<Value> = page.iter().take(limit).map(|i| item_json(i, now)).collect();
    Ok(Json(json!({ "items": out, "nextCursor": next })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddLockout {
    ip: String,
    #[serde(rename = "for")]
    duration: String,
    #[serde(default)]
    reason: Option<String>,
}

pub async fn add(
    State(state): State<AdminState>,
    JsonBody(req): JsonBody<AddLockout>,
) -> Result<(StatusCode, Json<Value>), AdminError> {
    // An AS number is checked against the table in force when it is locked.
    let target = match parse_asn(&req.ip) {
        Some(asn) => Err(asn),
        None => Ok(target("ip", &req.ip)?),
    };
    let duration = parse_duration(&req.duration).map_err(|m| AdminError::bad("for", m))?;
    let reason = req.reason.unwrap_or_default();
    if reason.len() > 200 {
        return Err(AdminError::unprocessable("reason", "at most 200 bytes"));
    }
    let target = match target {
        Ok(t) => t,
        Err(asn) => return add_asn(&state, asn, duration, reason).await,
    };
    let (made, now) = blocking(&state, move |e| {
        (
            e.lockouts().lock_target(target, duration, &reason),
            e.clock().now_ms(),
        )
    })
    .await?;
    let item = made.map_err(|e| AdminError::engine(e, "ip"))?;
    tracing::info!(ip = %net_text(&item.net), secs = duration.as_secs(), source = "admin", "lockout made");
    Ok((StatusCode::CREATED, Json(item_json(&item, now))))
}

/// An AS locked as its ranges: 201 with the first range's lockout as the item (`ip` naming
/// the AS) and every range locked in `cidrs`.
async fn add_asn(
    state: &AdminState,
    asn: u32,
    duration: std::time::Duration,
    reason: String,
) -> Result<(StatusCode, Json<Value>), AdminError> {
    let (made, now) = blocking(state, move |e| {
        (e.lock_asn(asn, duration, &reason), e.clock().now_ms())
    })
    .await?;
    let items = made.map_err(|e| AdminError::engine(e, "ip"))?;
    let Some(first) = items.first() else {
        return Err(AdminError::not_found(
            "ip",
            format!("AS{asn} has no ranges"),
        ));
    };
    let mut v = item_json(first, now);
    v["ip"] = json!(format!("AS{asn}"));
    v["cidrs"] = items.iter().map(|i| net_text(&i.net)).collect();
    tracing::info!(
        asn,
        ranges = items.len(),
        secs = duration.as_secs(),
        source = "admin",
        "AS lockout made"
    );
    Ok((StatusCode::CREATED, Json(v)))
}

/// `forgetStrikes` from the query of a lift: `true` or `false` (absent: `false`); any other
/// parameter is named as unknown.
fn forget_strikes(q: &HashMap<String, String>) -> Result<bool, AdminError> {
    if let Some(k) = q.keys().find(|k| *k != "forgetStrikes") {
        return Err(AdminError::bad(
            k,
            "unknown query parameter (use `forgetStrikes`)",
        ));
    }
    match q.get("forgetStrikes").map(String::as_str) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(AdminError::bad(
            "forgetStrikes",
            format!("{other:?}: expected true or false"),
        )),
    }
}

pub async fn remove(
    State(state): State<AdminState>,
    AdminPath(ip): AdminPath<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, AdminError> {
    let forget = forget_strikes(&q)?;
    if let Some(asn) = parse_asn(&ip).filter(|_| forget) {
        return Err(AdminError::bad(
            "forgetStrikes",
            format!("strikes are held per address, not by AS{asn}: name one address"),
        ));
    }
    if let Some(asn) = parse_asn(&ip) {
        let lifted = blocking(&state, move |e| e.lift_asn(asn))
            .await?
            .map_err(|e| AdminError::engine(e, "ip"))?;
        if lifted == 0 {
            return Err(AdminError::not_found(
                "ip",
                format!("AS{asn} is not locked out"),
            ));
        }
        tracing::info!(asn, ranges = lifted, source = "admin", "AS lockout lifted");
        return Ok(Json(
            json!({ "ip": format!("AS{asn}"), "lifted": true, "ranges": lifted }),
        ));
    }
    let target = target("ip", &ip)?;
    if forget {
        let LockTarget::Addr(addr) = target else {
            return Err(AdminError::bad(
                "forgetStrikes",
                format!("strikes are held per address, not by a range ({ip}): name one address"),
            ));
        };
        return lift_forgetting(&state, &ip, addr).await;
    }
    let lifted = blocking(&state, move |e| e.lockouts().lift_target(target))
        .await?
        .map_err(|e| AdminError::engine(e, "ip"))?;
    if !lifted {
        return Err(AdminError::not_found(
            "ip",
            format!("{ip} is not locked out"),
        ));
    }
    tracing::info!(%ip, source = "admin", "lockout lifted");
    Ok(Json(json!({ "ip": ip, "lifted": true })))
}

/// Lifts `addr`'s lockout, if it has one, and forgets its strikes: 404 only when it had
/// neither, so strikes left by a lockout that has run out can be forgotten too.
async fn lift_forgetting(
    state: &AdminState,
    ip: &str,
    addr: std::net::IpAddr,
) -> Result<Json<Value>, AdminError> {
    let (lifted, forgotten) = blocking(state, move |e| {
        let m = e.lockouts();
        Ok::<_, crate::engine::error::EngineError>((
            m.lift_target(LockTarget::Addr(addr))?,
            m.forget_strikes(addr)?,
        ))
    })
    .await?
    .map_err(|e| AdminError::engine(e, "ip"))?;
    if !lifted && forgotten.is_none() {
        return Err(AdminError::not_found(
            "ip",
            format!("{ip} is not locked out and holds no strikes"),
        ));
    }
    tracing::info!(%ip, lifted, strikes = forgotten.unwrap_or(0), source = "admin", "lockout lifted, strikes forgotten");
    Ok(Json(
        json!({ "ip": ip, "lifted": lifted, "strikesForgotten": forgotten.unwrap_or(0) }),
    ))
}
