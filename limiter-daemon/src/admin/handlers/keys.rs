//! `/admin/v1/keys`: issue (the whole key in the answer, this once; the store keeps its hash),
//! list and show (never a secret or its hash), revoke (metered down on the next request).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::blocking::blocking;
use super::time_text::rfc3339;
use crate::admin::body::JsonBody;
use crate::admin::path::AdminPath;
use crate::admin::problem::AdminError;
use crate::admin::state::AdminState;
use crate::engine::error::EngineError;
use crate::engine::keys::IssueKey;
use crate::model::KeyRecord;
use limiter_common::args::parse_tier;

/// Parses a tier name as the config and the API write it.
pub fn record_json(r: &KeyRecord) -> Value {
    json!({
        "id": r.id,
        "tier": r.tier.as_str(),
        "hourlyLimit": r.hourly_limit,
        "owner": r.owner,
        "note": r.note,
        "createdAt": rfc3339(r.created_ms),
        "revoked": r.is_revoked(),
        "revokedAt": r.revoked_ms.map(rfc3339),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Issue {
    #[serde(default)]
    tier: Option<String>,
    #[serde(default)]
    hourly_limit: Option<u64>,
    #[serde(default)]
    owner: Option<String>,
    #[serde(default)]
    note: Option<String>,
}

pub async fn issue(
    State(state): State<AdminState>,
    JsonBody(req): JsonBody<Issue>,
) -> Result<(StatusCode, Json<Value>), AdminError> {
    let tier = req
        .tier
        .as_deref()
        .map(parse_tier)
        .transpose()
        .map_err(|m| AdminError::bad("tier", m))?;
    let hourly_limit = match req.hourly_limit {
        None => None,
        Some(0) => {
            return Err(AdminError::unprocessable(
                "hourlyLimit",
                "must be at least 1",
            ))
        }
        Some(n) => Some(u32::try_from(n).map_err(|_| {
            AdminError::unprocessable("hourlyLimit", format!("at most {}", u32::MAX))
        })?),
    };
    for (field, v) in [("owner", &req.owner), ("note", &req.note)] {
        let Some(v) = v else { continue };
        if v.len() > 200 || v.chars().any(char::is_control) {
            return Err(AdminError::unprocessable(
                field,
                "at most 200 bytes, no control characters",
            ));
        }
    }
    let issued = blocking(&state, move |e| {
        e.keys().issue(IssueKey {
            hourly_limit,
            tier,
            owner: req.owner,
            note: req.note,
        })
    })
    .await?
    .map_err(|e| AdminError::engine(e, "body"))?;
    tracing::info!(id = %issued.record.id, tier = issued.record.tier.as_str(), "API key issued");
    let mut out = record_json(&issued.record);
    out["key"] = json!(issued.token);
    Ok((StatusCode::CREATED, Json(out)))
}

pub async fn list(State(state): State<AdminState>) -> Result<Json<Value>, AdminError> {
    let (keys, bad) = blocking(&state, |e| (e.keys().list(), e.keys().unreadable())).await?;
    let mut keys = keys.map_err(|e| AdminError::engine(e, "id"))?;
    let bad = bad.map_err(|e| AdminError::engine(e, "id"))?;
    keys.sort_by_key(|k| k.created_ms);
    let items: Vec<Value> = keys.iter().map(record_json).collect();
    // Records the store cannot read: by their id (what DELETE takes) and raw key.
    let unreadable: Vec<Value> = bad
        .iter()
        .map(|r| json!({ "id": r.id, "key": r.key, "error": r.error }))
        .collect();
    Ok(Json(json!({ "items": items, "unreadable": unreadable })))
}

pub async fn show(
    State(state): State<AdminState>,
    AdminPath(id): AdminPath<String>,
) -> Result<Json<Value>, AdminError> {
    let lookup = id.clone();
    let rec = blocking(&state, move |e| e.keys().get(&lookup))
        .await?
        .map_err(|e| AdminError::engine(e, "id"))?;
    match rec {
        Some(r) => Ok(Json(record_json(&r))),
        None => Err(AdminError::not_found(
            "id",
            format!("no API key with id {id}"),
        )),
    }
}

pub async fn revoke(
    State(state): State<AdminState>,
    AdminPath(id): AdminPath<String>,
) -> Result<Json<Value>, AdminError> {
    let lookup = id.clone();
    let rec = blocking(&state, move |e| {
        let revoked = e.keys().revoke(&lookup);
        // A record the store cannot read cannot be revoked: it is deleted (its key then
        // does not authenticate, as it did not before).
        if matches!(revoked, Ok(false) | Err(EngineError::BadKeyId { .. }))
            && e.keys().remove_unreadable(&lookup)?
        {
            return Ok(Err(()));
        }
        revoked?;
        e.keys().get(&lookup).map(Ok)
    })
    .await?
    .map_err(|e| AdminError::engine(e, "id"))?;
    let rec = match rec {
        Ok(rec) => rec,
        Err(()) => {
            tracing::info!(%id, "unreadable API key record removed");
            return Ok(Json(
                json!({ "id": id, "removed": true, "unreadable": true }),
            ));
        }
    };
    match rec {
        Some(r) => {
            tracing::info!(id = %r.id, "API key revoked");
            Ok(Json(record_json(&r)))
        }
        None => Err(AdminError::not_found(
            "id",
            format!("no API key with id {id}"),
        )),
    }
}
