//! `GET /admin/v1/clients/{ip}`: one address's windows (use, limit, reset), strikes, lockout,
//! list membership, and what the kernel holds for it.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::blocking::blocking;
use super::time_text::{rfc3339, secs_left};
use crate::admin::path::AdminPath;
use crate::admin::problem::AdminError;
use crate::admin::state::AdminState;
use crate::model::Tier;
use limiter_common::args::parse_ip;

fn kernel_tier(index: u32) -> &'static str {
    Tier::ALL
        .into_iter()
        .find(|t| crate::kernel::sink::tier_index(*t) == index)
        .map_or("unknown", Tier::as_str)
}

pub async fn show(
    State(state): State<AdminState>,
    AdminPath(ip): AdminPath<String>,
) -> Result<Json<Value>, AdminError> {
    let ip = parse_ip(&ip).map_err(|m| AdminError::bad("ip", m))?;
    let (report, now) = blocking(&state, move |e| (e.client(ip), e.clock().now_ms())).await?;
    let r = report.map_err(|e| AdminError::engine(e, "ip"))?;
    let windows: Vec<Value> = r
        .anon
        .iter()
        .filter_map(|(k, limit)| {
            let limit = (*limit)?;
            let (used, reset_ms) = r
                .usage
                .as_ref()
                .map_or((0, 0), |u| (u.used[k], u.reset_ms[k]));
            Some(json!({
                "window": k.as_str(),
                "used": used,
                "limit": limit,
                "remaining": limit.saturating_sub(used),
                "resetSecs": reset_ms.div_ceil(1000),
            }))
        })
        .collect();
    let lockout = r.lockout.map(|l| {
        json!({
            "until": rfc3339(l.until_ms),
            "remainingSecs": secs_left(l.until_ms, now),
            "level": l.level,
            "cause": l.cause,
        })
    });
    let kernel = match &state.kernel.maps {
        None => Value::Null,
        Some(maps) => {
            let maps = std::sync::Arc::clone(maps);
            let group = r.group;
            let (lock, tier) =
                tokio::task::spawn_blocking(move || (maps.lockout(group), maps.tier(group)))
                    .await
                    .map_err(|e| AdminError::internal("reading the kernel maps", &e))?;
            let lock = lock.map_err(|e| AdminError::internal("reading the kernel lockout", &e))?;
            let tier = tier.map_err(|e| AdminError::internal("reading the kernel tier", &e))?;
            json!({
                "lockout": lock.map(|l| json!({
                    "level": l.level,
                    "remainingSecs": l.remaining.map(|d| d.as_secs()),
                })),
                "tier": tier.map(|(t, expired)| json!({ "tier": kernel_tier(t), "expired": expired })),
            })
        }
    };
    // The tier last verified from this address is what the kernel's tier map holds; without
    // it the address is metered anonymously.
    let tier_seen = kernel
        .get("tier")
        .and_then(|t| t.get("tier"))
        .and_then(Value::as_str)
        .unwrap_or("anon")
        .to_string();
    Ok(Json(json!({
        "ip": ip.to_string(),
        "group": r.group.to_string(),
        "identity": r.identity,
        "tier": tier_seen,
        "windows": windows,
        "strikes": r.strikes,
        "lockout": lockout,
        "allowListed": r.allow_listed,
        "denyListed": r.deny_listed,
        "kernel": kernel,
    })))
}
