//! `GET /admin/v1/stats?top=N`: what the operator page shows live and Prometheus cannot give
//! per caller: decisions so far by tier and action (the page derives rates from two polls),
//! the last five minutes' top talkers by refusals and by volume (with their addresses unless
//! `[admin] show_addresses = false`), top networks (/24, /48) and tier mix, held requests,
//! lockouts in force and the store's state.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::blocking::blocking;
use super::time_text::{rfc3339, wall_ms};
use crate::admin::problem::AdminError;
use crate::admin::state::AdminState;
use crate::metrics::talkers::{NetTalker, Talker, WINDOW_SECS};

pub const DEFAULT_TOP: usize = 10;
pub const MAX_TOP: usize = 100;

/// `address` is the caller's address when `[admin] show_addresses` allows it (else `null`).
fn talker_json(t: &Talker, show: bool) -> Value {
    json!({
        "identity": t.identity,
        "address": t.address.filter(|_| show).map(|a| a.to_string()),
        "tier": t.tier,
        "requests": t.requests,
        "refused": t.refused,
    })
}

/// A network by name, or (`show_addresses = false`) by a hash that still tells rows apart.
fn network_json(n: &NetTalker, show: bool) -> Value {
    let name = if show {
        n.network.to_string()
    } else {
        let d = crate::admin::state::digest(n.network.to_string().as_bytes());
        format!(
            "net:{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
            d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]
        )
    };
    json!({
        "network": name,
        "requests": n.requests,
        "refused": n.refused,
        "callers": n.callers,
    })
}

fn top(q: &HashMap<String, String>) -> Result<usize, AdminError> {
    if let Some(k) = q.keys().find(|k| *k != "top") {
        return Err(AdminError::bad(k, "unknown query parameter (use `top`)"));
    }
    let Some(text) = q.get("top") else {
        return Ok(DEFAULT_TOP);
    };
    match text.parse::<usize>() {
        Ok(n @ 1..=MAX_TOP) => Ok(n),
        Ok(_) => Err(AdminError::unprocessable(
            "top",
            format!("must be 1 to {MAX_TOP}"),
        )),
        Err(_) => Err(AdminError::bad(
            "top",
            format!("{text:?} is not a number (1 to {MAX_TOP})"),
        )),
    }
}

pub async fn show(
    State(state): State<AdminState>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, AdminError> {
    let n = top(&q)?;
    let Some(metrics) = state.metrics.as_ref().map(Arc::clone) else {
        return Err(AdminError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            "stats are not wired in this daemon",
        ));
    };
    // Listing lockouts may be a store round trip.
    let (lockouts, degraded, errors, adrift) = blocking(&state, |e| {
        let store = e.store();
        (
            e.lockouts().list().map(|l| l.len()),
            store.degraded(),
            store.remote_errors(),
            store.not_following(),
        )
    })
    .await?;
    let lockouts = lockouts.map_err(|e| AdminError::internal("listing lockouts", &e))?;
    let decisions: Vec<Value> = metrics
        .decisions
        .totals()
        .into_iter()
        .map(|(tier, action, count)| json!({"tier": tier, "action": action.as_str(), "count": count}))
        .collect();
    let recent = metrics.talkers.read(n);
    let show = state.engine.config().admin.show_addresses;
    let held = metrics.sources.http.get().map(|h| {
        json!({
            "now": h.gate.held(),
            "admitted": h.gate.admitted(),
            "refused": h.gate.refused(),
        })
    });
    let [anon, session, crawler, agent, sponsor] = recent.tier_mix;
    Ok(Json(json!({
        "at": rfc3339(wall_ms()),
        "atMs": wall_ms(),
        "decisions": decisions,
        "windowSecs": WINDOW_SECS,
        "tierMix": {"anon": anon, "session": session, "crawler": crawler, "agent": agent, "sponsor": sponsor},
        "showAddresses": show,
        "topByRefusals": recent.by_refusals.iter().map(|t| talker_json(t, show)).collect::<Vec<_>>(),
        "topByVolume": recent.by_volume.iter().map(|t| talker_json(t, show)).collect::<Vec<_>>(),
        "topNetworks": recent.networks.iter().map(|t| network_json(t, show)).collect::<Vec<_>>(),
        "untracked": recent.untracked,
        "held": held,
        "lockoutsActive": lockouts,
        "store": {"degraded": degraded, "errors": errors, "followerError": adrift},
    })))
}
