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
        ConfigError::Parse { line, field, .. } => {
            (field.clone().unwrap_or_else(|| "config".to_string()), *line)
        }
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use axum::body::Body;
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    use super::*;
    use crate::admin::state::{KernelView, ReloadFn};
    use crate::clock::{Clock as _, SystemClock};
    use crate::config::kernel::KernelMode;
    use crate::config::Config;
    use crate::embedded::EmbeddedStore;
    use crate::engine::sink::NoKernel;
    use crate::engine::Engine;

    async fn post_reload(dir: &std::path::Path, hook: Option<ReloadFn>) -> (u16, Value) {
        let cfg = Arc::new(Config::with_state_dir(dir));
        let store = Arc::new(EmbeddedStore::open(&cfg.store, SystemClock.now_ms()).unwrap());
        let engine = Arc::new(Engine::new(
            cfg,
            store,
            Arc::new(NoKernel),
            Arc::new(SystemClock),
        ));
        let kernel = KernelView {
            mode: KernelMode::Off,
            maps: None,
        };
        let state = AdminState::new(engine, kernel, PathBuf::from("x.toml"), hook, "tok");
        let req = http::Request::post("/admin/v1/reload")
            .header("authorization", "Bearer tok")
            .body(Body::empty())
            .unwrap();
        let resp = crate::admin::router(state).oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn applied_refused_and_unwired() {
        let dir = tempfile::tempdir().unwrap();
        let ok: ReloadFn = Arc::new(|| Ok(vec!["tiers.anon.burst: 120 → 60".to_string()]));
        let (status, v) = post_reload(dir.path(), Some(ok)).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(
            v,
            json!({"applied": true, "changes": ["tiers.anon.burst: 120 → 60"]})
        );

        let refused: ReloadFn = Arc::new(|| {
            Err(ConfigError::InvalidAt {
                path: "x.toml".into(),
                line: 12,
                field: "tiers.anon.burst".into(),
                message: "must be at least 1".into(),
            })
        });
        let (status, v) = post_reload(dir.path(), Some(refused)).await;
        assert_eq!(status, 422, "{v}");
        assert_eq!(v["field"], "tiers.anon.burst");
        assert_eq!(v["line"], 12);
        assert!(
            v["detail"].as_str().unwrap().contains("old config stays"),
            "{v}"
        );

        let (status, v) = post_reload(dir.path(), None).await;
        assert_eq!(status, 503, "{v}");
    }
}
