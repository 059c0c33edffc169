//! `GET /admin/v1/stats?top=N`: what the operator page shows live and Prometheus cannot give
//! per caller: decisions so far by tier and action (the page derives rates from two polls),
//! the last five minutes' top talkers by refusals and by volume (with their addresses unless
//! `[admin] show_addresses = false`, and each address's strikes and the lockout in force on
//! it), top networks (/24, /48, ASN; a prefix with its lockout), crawlers and signed agents by
//! name and proof (fakes under the name they claim), tier mix, held requests, lockouts in
//! force and the store's state.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::blocking::blocking;
use super::lockouts::item_json;
use super::time_text::{rfc3339, wall_ms};
use crate::admin::problem::AdminError;
use crate::admin::state::AdminState;
use crate::admin::talkers::{NamedTalker, NetTalker, Talker, WINDOW_SECS};
use crate::engine::asn_lockouts::reason_mark;
use crate::engine::error::EngineError;
use crate::engine::lockouts::LockoutItem;
use crate::engine::Engine;
use crate::model::network::NetworkName;

pub const DEFAULT_TOP: usize = 10;
pub const MAX_TOP: usize = 100;

/// What the store says of the addresses on the page: strikes by address, and every lockout
/// in force (addresses and ranges).
struct Standing {
    strikes: HashMap<IpAddr, u32>,
    lockouts: Vec<LockoutItem>,
    now_ms: u64,
}

impl Standing {
    /// Reads the strikes of `addresses` and every lockout in force: store round trips with
    /// Valkey (one per address, and the lists), so it runs on the blocking pool.
    fn read(e: &Engine, addresses: &[IpAddr]) -> Result<Standing, EngineError> {
        let l = e.lockouts();
        let strikes = addresses
            .iter()
            .map(|a| Ok((*a, l.strikes(*a)?)))
            .collect::<Result<HashMap<_, _>, EngineError>>()?;
        Ok(Standing {
            strikes,
            lockouts: l.all()?,
            now_ms: e.clock().now_ms(),
        })
    }

    /// The lockout in force on `ip`: its own, else the narrowest range holding it.
    fn lockout_of(&self, ip: IpAddr) -> Option<&LockoutItem> {
        self.lockouts
            .iter()
            .filter(|i| i.net.contains(&ip))
            .max_by_key(|i| i.net.prefix_len())
    }
}

/// A lockout as `GET /admin/v1/lockouts` lists it; its `ip` left out (`null`) when addresses
/// are not shown, or it would name the row's address or network.
fn lockout_json(i: &LockoutItem, show: bool, now_ms: u64) -> Value {
    let mut v = item_json(i, now_ms);
    if !show {
        v["ip"] = Value::Null;
    }
    v
}

/// `address` is the caller's address when `[admin] show_addresses` allows it (else `null`);
/// `strikes` and `lockout` are those of the address (`null` for a caller without one: a key,
/// token or agent is not struck by address).
fn talker_json(t: &Talker, show: bool, standing: &Standing) -> Value {
    let lockout = t
        .address
        .and_then(|a| standing.lockout_of(a))
        .map(|i| lockout_json(i, show, standing.now_ms));
    json!({
        "identity": t.identity,
        "address": t.address.filter(|_| show).map(|a| a.to_string()),
        "tier": t.tier,
        "requests": t.requests,
        "refused": t.refused,
        "refusedFor": t.refused_for.map(|r| r.as_str()),
        "strikes": t.address.map(|a| standing.strikes.get(&a).copied().unwrap_or(0)),
        "lockout": lockout,
    })
}

/// A crawler or agent by the name it gives and its proof.
fn named_json(t: &NamedTalker) -> Value {
    json!({
        "name": &*t.name,
        "proof": t.proof.as_str(),
        "requests": t.requests,
        "refused": t.refused,
        "perSecond": t.requests as f64 / WINDOW_SECS as f64,
    })
}

/// A network by name, or (`show_addresses = false`) by a hash that still tells rows apart.
/// `kind` is `prefix` or `asn`; a prefix carries the lockout of exactly that range, an AS the
/// first of the range lockouts its lock made, named by the AS (what the page's lock button
/// makes and its unlock lifts).
fn network_json(n: &NetTalker, show: bool, standing: &Standing) -> Value {
    let (kind, lockout) = match n.network {
        NetworkName::Prefix(p) => (
            "prefix",
            standing
                .lockouts
                .iter()
                .find(|i| i.net == p)
                .map(|i| lockout_json(i, show, standing.now_ms)),
        ),
        NetworkName::Asn(asn) => {
            let mark = reason_mark(asn);
            let lockout = standing
                .lockouts
                .iter()
                .find(|i| i.reason.starts_with(&mark))
                .map(|i| {
                    let mut v = item_json(i, standing.now_ms);
                    v["ip"] = json!(format!("AS{asn}"));
                    v
                });
            ("asn", lockout)
        }
    };
    let name = if show || kind == "asn" {
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
        "kind": kind,
        "requests": n.requests,
        "refused": n.refused,
        "callers": n.callers,
        "lockout": lockout,
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
    let cfg = state.engine.config();
    let asn_table = cfg
        .networks
        .asn
        .as_ref()
        .and(cfg.networks.asn_table.as_ref())
        .map(Arc::clone);
    let recent = state
        .talkers
        .read(n, |ip| asn_table.as_ref()?.lookup(ip).map(|r| r.asn));
    let mut addresses: Vec<IpAddr> = recent
        .by_refusals
        .iter()
        .chain(&recent.by_volume)
        .filter_map(|t| t.address)
        .collect();
    addresses.sort_unstable();
    addresses.dedup();
    // Listing lockouts and reading strikes may be store round trips (at most 2 × top).
    let (standing, degraded, errors, adrift) = blocking(&state, move |e| {
        let store = e.store();
        (
            Standing::read(e, &addresses),
            store.degraded(),
            store.remote_errors(),
            store.not_following(),
        )
    })
    .await?;
    let standing = standing.map_err(|e| AdminError::internal("listing lockouts", &e))?;
    let decisions: Vec<Value> = metrics
        .decisions
        .totals()
        .into_iter()
        .map(|(tier, action, count)| json!({"tier": tier, "action": action.as_str(), "count": count}))
        .collect();
    let show = cfg.admin.show_addresses;
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
        "topByRefusals": recent.by_refusals.iter().map(|t| talker_json(t, show, &standing)).collect::<Vec<_>>(),
        "topByVolume": recent.by_volume.iter().map(|t| talker_json(t, show, &standing)).collect::<Vec<_>>(),
        "topNetworks": recent.networks.iter().map(|t| network_json(t, show, &standing)).collect::<Vec<_>>(),
        "crawlers": recent.named.iter().map(named_json).collect::<Vec<_>>(),
        "untracked": recent.untracked,
        "held": held,
        "lockoutsActive": standing.lockouts.len(),
        "store": {"degraded": degraded, "errors": errors, "followerError": adrift},
    })))
}
