//! `POST /admin/v1/reload`: runs the app's reload hook. Applied → the list of changes; refused
//! → 422 with the field and line of the config error, the old config still in force; no hook
//! wired → 503.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use crate::admin::problem::AdminError;
use crate::admin::state::AdminState;
use crate::config::ConfigError;

/// The refusal as a problem: field and line where the error has them.
pub fn refusal(err: &ConfigError) -> AdminError {
    let (field, line) = match err {
        ConfigError::InvalidAt { field, line, .. } => (field.clone(), Some(*line)),
        ConfigError::Invalid { field, .. } => (field.clone(), None),
        ConfigError::Parse { line, .. } => ("config".to_string(), *line),
        ConfigError::Env { var, .. } => (var.clone(), None),
        ConfigError::Io { .. } => ("config".to_string(), None),
    };
    let mut e = AdminError::unprocessable(&field, format!("{err}; the old config stays in force"));
    e.line = line;
    e
}

pub async fn reload(State(state): State<AdminState>) -> Result<Json<Value>, AdminError> {
    let Some(hook) = state.reload.clone() else {
        return Err(AdminError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            "reload not wired in this build of the daemon",
        ));
    };
    let res = tokio::task::spawn_blocking(move || hook())
        .await
        .map_err(|e| AdminError::internal("the reload", &e))?;
    match res {
        Ok(changes) => Ok(Json(json!({ "applied": true, "changes": changes }))),
        Err(err) => Err(refusal(&err)),
    }
}
