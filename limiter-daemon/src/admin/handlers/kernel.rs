//! `GET /admin/v1/kernel`: the dataplane's mode, interfaces, per-verdict counters and map fill
//! (the same report as `limiter-daemon kernel status`), or that the daemon runs userspace-only.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::admin::problem::AdminError;
use crate::admin::state::AdminState;
use crate::config::kernel::KernelMode;
use crate::kernel::status;

fn mode_name(m: KernelMode) -> &'static str {
    match m {
        KernelMode::Off => "off",
        KernelMode::Auto => "auto",
        KernelMode::Required => "required",
    }
}

pub async fn show(State(state): State<AdminState>) -> Result<Json<Value>, AdminError> {
    let configured = mode_name(state.kernel.mode);
    let Some(maps) = state.kernel.maps.as_ref().map(Arc::clone) else {
        return Ok(Json(json!({
            "attached": false,
            "configuredMode": configured,
            "mode": "userspace-only",
            "interfaces": [],
            "counters": {},
            "maps": [],
        })));
    };
    let st = tokio::task::spawn_blocking(move || status::gather(maps.layout(), &maps))
        .await
        .map_err(|e| AdminError::internal("reading the kernel", &e))?
        .map_err(|e| AdminError::internal("reading the kernel", &e))?;
    let mut v = serde_json::to_value(&st).map_err(|e| AdminError::internal("rendering", &e))?;
    v["attached"] = json!(true);
    v["configuredMode"] = json!(configured);
    Ok(Json(v))
}
