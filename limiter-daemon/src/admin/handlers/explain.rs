//! `POST /admin/v1/explain`: the body of `/v1/decide`, answered with the decision the engine
//! would make, every window, and the rule that decided. Nothing is counted or struck.

use axum::extract::State;
use axum::Json;
use bytes::Bytes;
use serde_json::{json, Value};

use super::blocking::blocking;
use crate::admin::body::RawJson;
use crate::admin::problem::AdminError;
use crate::admin::state::AdminState;
use crate::engine::RequestView;
use crate::identity::client_ip::Client;
use crate::model::{Action, Decision};
use crate::surfaces::api::decide_body::parse;
use crate::surfaces::api::state::ApiLimits;

fn decided_by(d: &Decision) -> Value {
    match d.action() {
        Action::Allow => Value::Null,
        Action::Delay => json!(format!(
            "daily (delay {})",
            d.delay_kind().map_or("", |k| match k {
                crate::model::DelayKind::Soft => "soft",
                crate::model::DelayKind::Hard => "hard",
            })
        )),
        Action::Reject => json!(d.reason().map(|r| r.as_str())),
    }
}

pub async fn explain(
    State(state): State<AdminState>,
    RawJson(body): RawJson,
) -> Result<Json<Value>, AdminError> {
    let limits = ApiLimits::from_settings(&state.engine.config().http).headers;
    let described = parse(&body, limits).map_err(|e| {
        AdminError::bad(
            &e.field().unwrap_or_else(|| "body".to_string()),
            e.to_string(),
        )
    })?;
    drop::<Bytes>(body);
    let d = blocking(&state, move |e| {
        e.explain(&RequestView {
            client: Client::Addr(described.ip),
            method: &described.method,
            path: &described.path,
            headers: &described.headers,
        })
    })
    .await?;
    let windows: Vec<Value> = d
        .windows
        .iter()
        .map(|w| {
            json!({
                "window": w.kind.as_str(),
                "limit": w.limit,
                "remaining": w.remaining,
                "windowSecs": w.window_secs,
                "resetSecs": w.reset_secs,
            })
        })
        .collect();
    Ok(Json(json!({
        "action": d.action().as_str(),
        "tier": d.tier.as_str(),
        "reason": d.reason().map(|r| r.as_str()),
        "delayMs": u64::try_from(d.delay().as_millis()).unwrap_or(u64::MAX),
        "retryAfter": d.retry_after_secs(),
        "identity": d.identity,
        "keyStatus": d.key_status.map(|k| k.as_str()),
        "crawler": d.crawler.map(|c| c.as_str()),
        "agentSignature": d.agent.map(|a| a.as_str()),
        "cost": d.cost,
        "windows": windows,
        "decidedBy": decided_by(&d),
        "counted": false,
    })))
}
