//! `/admin/v1/lists/{allow,deny}`: list, add and remove CIDRs, in the store and the kernel's
//! tries at once. Allow entries do not expire; deny entries may (`for`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::blocking::blocking;
use super::time_text::{rfc3339, secs_left};
use crate::admin::body::JsonBody;
use crate::admin::path::AdminPath;
use crate::admin::problem::AdminError;
use crate::admin::state::AdminState;
use crate::model::{ListEntry, ListKind};
use crate::store::unreadable::UnreadableRecord;
use limiter_common::args::{net_text, parse_cidr, parse_duration};

fn kind(s: &str) -> Result<ListKind, AdminError> {
    match s {
        "allow" => Ok(ListKind::Allow),
        "deny" => Ok(ListKind::Deny),
        _ => Err(AdminError::not_found(
            "kind",
            format!("{s:?}: the lists are `allow` and `deny`"),
        )),
    }
}

fn entry_json(e: &ListEntry, now: u64) -> Value {
    json!({
        "cidr": e.net.to_string(),
        "until": e.until_ms.map(rfc3339),
        "remainingSecs": e.until_ms.map(|u| secs_left(u, now)),
        "reason": e.comment,
    })
}

/// An entry the store holds but cannot read: its raw field (what DELETE takes) and why.
pub fn unreadable_json(r: &UnreadableRecord) -> Value {
    json!({ "field": r.field, "key": r.key, "error": r.error })
}

pub async fn list(
    State(state): State<AdminState>,
    AdminPath(k): AdminPath<String>,
) -> Result<Json<Value>, AdminError> {
    let k = kind(&k)?;
    let (entries, bad, now) = blocking(&state, move |e| {
        (
            e.lists().list(k),
            e.lists().unreadable(k),
            e.clock().now_ms(),
        )
    })
    .await?;
    let entries = entries.map_err(|e| AdminError::engine(e, "cidr"))?;
    let bad = bad.map_err(|e| AdminError::engine(e, "cidr"))?;
    let items: Vec<Value> = entries
        .iter()
        .filter(|e| e.is_active(now))
        .map(|e| entry_json(e, now))
        .collect();
    let unreadable: Vec<Value> = bad.iter().map(unreadable_json).collect();
    Ok(Json(json!({ "items": items, "unreadable": unreadable })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddEntry {
    cidr: String,
    #[serde(default, rename = "for")]
    duration: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

pub async fn add(
    State(state): State<AdminState>,
    AdminPath(k): AdminPath<String>,
    JsonBody(req): JsonBody<AddEntry>,
) -> Result<(StatusCode, Json<Value>), AdminError> {
    let k = kind(&k)?;
    let net = parse_cidr(&req.cidr).map_err(|m| AdminError::bad("cidr", m))?;
    let duration = req
        .duration
        .as_deref()
        .map(parse_duration)
        .transpose()
        .map_err(|m| AdminError::bad("for", m))?;
    if k == ListKind::Allow && duration.is_some() {
        return Err(AdminError::unprocessable(
            "for",
            "allow-list entries do not expire; leave `for` out",
        ));
    }
    let reason = req.reason.unwrap_or_default();
    if reason.len() > 200 {
        return Err(AdminError::unprocessable("reason", "at most 200 bytes"));
    }
    let (res, now) = blocking(&state, move |e| {
        let now = e.clock().now_ms();
        let entry = ListEntry {
            net,
            until_ms: duration
                .map(|d| now.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))),
            comment: reason,
        };
        (e.lists().add(k, entry.clone()).map(|()| entry), now)
    })
    .await?;
    let entry = res.map_err(|e| AdminError::engine(e, "cidr"))?;
    tracing::info!(cidr = %net_text(&entry.net), list = ?k, "list entry added");
    Ok((StatusCode::CREATED, Json(entry_json(&entry, now))))
}

/// Deletes the unreadable entry under the raw field `field`, if there is one.
async fn remove_unreadable(
    state: &AdminState,
    k: ListKind,
    field: &str,
) -> Result<Option<Json<Value>>, AdminError> {
    let f = field.to_string();
    let removed = blocking(state, move |e| e.lists().remove_unreadable(k, &f))
        .await?
        .map_err(|e| AdminError::engine(e, "cidr"))?;
    Ok(removed.then(|| {
        tracing::info!(field, list = ?k, "unreadable list entry removed");
        Json(json!({ "field": field, "removed": true, "unreadable": true }))
    }))
}

pub async fn remove(
    State(state): State<AdminState>,
    AdminPath((k, cidr)): AdminPath<(String, String)>,
) -> Result<Json<Value>, AdminError> {
    let k = kind(&k)?;
    let net = match parse_cidr(&cidr) {
        Ok(net) => net,
        // Not a network: perhaps the raw field of an entry the store cannot read.
        Err(m) => {
            return match remove_unreadable(&state, k, &cidr).await? {
                Some(done) => Ok(done),
                None => Err(AdminError::bad("cidr", m)),
            }
        }
    };
    let removed = blocking(&state, move |e| e.lists().remove(k, &net))
        .await?
        .map_err(|e| AdminError::engine(e, "cidr"))?;
    if !removed {
        if let Some(done) = remove_unreadable(&state, k, &cidr).await? {
            return Ok(done);
        }
        return Err(AdminError::not_found(
            "cidr",
            format!(
                "{net} is not on the {} list",
                if k == ListKind::Allow {
                    "allow"
                } else {
                    "deny"
                }
            ),
        ));
    }
    tracing::info!(cidr = %net, list = ?k, "list entry removed");
    Ok(Json(json!({ "cidr": net.to_string(), "removed": true })))
}
