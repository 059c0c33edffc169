//! `GET /admin/v1/history`: the ring of samples behind the operator page's charts, the last
//! 15 minutes at 5 s: decisions per second by action, refusals per second by reason, kernel
//! packets per second by verdict and requests held, oldest point first.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use limiter_common::verdict;
use serde_json::{json, Map, Value};

use crate::admin::problem::AdminError;
use crate::admin::state::AdminState;
use crate::metrics::history::{Point, POINTS, STEP_SECS};
use crate::model::Reason;

/// Rates to two decimals: the page draws them, nobody reads the 15th digit.
fn r2(v: f64) -> Value {
    json!((v * 100.0).round() / 100.0)
}

fn point_json(p: &Point) -> Value {
    let rejects: Map<String, Value> = Reason::ALL
        .iter()
        .zip(&p.rejects)
        .map(|(r, v)| (r.as_str().to_string(), r2(*v)))
        .collect();
    let kernel: Map<String, Value> = verdict::NAMES
        .iter()
        .zip(&p.verdicts)
        .map(|(n, v)| ((*n).to_string(), r2(*v)))
        .collect();
    json!({
        "atMs": p.at_ms,
        "allow": r2(p.allow),
        "delay": r2(p.delay),
        "reject": r2(p.reject),
        "rejects": rejects,
        "kernel": kernel,
        "held": p.held,
    })
}

pub async fn show(State(state): State<AdminState>) -> Result<Json<Value>, AdminError> {
    let Some(metrics) = state.metrics.as_ref().map(Arc::clone) else {
        return Err(AdminError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            "history is not wired in this daemon",
        ));
    };
    let points: Vec<Value> = metrics.history.read().iter().map(point_json).collect();
    Ok(Json(json!({
        "stepSecs": STEP_SECS,
        "maxPoints": POINTS,
        "kernelAttached": state.kernel.maps.is_some(),
        "points": points,
    })))
}
