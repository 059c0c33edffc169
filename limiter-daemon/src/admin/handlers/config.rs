//! `GET /admin/v1/config`: the config file in force as JSON, with every secret replaced by
//! `"<redacted>"` (fields named `*secret*`, `*password*`, `*token*` other than paths, and the
//! credentials part of an address), plus the environment overrides that applied over it.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::admin::problem::AdminError;
use crate::admin::state::AdminState;

pub const REDACTED: &str = "<redacted>";

fn secret_name(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    !k.ends_with("_file") && (k.contains("secret") || k.contains("password") || k.contains("token"))
}

/// Replaces secrets in `v` in place.
pub fn redact(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, val) in map.iter_mut() {
                if secret_name(k) && !val.is_null() {
                    *val = json!(REDACTED);
                } else if let Value::String(s) = val {
                    // `redis://user:pass@host`: keep the host, drop the credentials.
                    if let Some((scheme_user, host)) = s.rsplit_once('@') {
                        if scheme_user.contains("://") {
                            let scheme = scheme_user.split("://").next().unwrap_or("");
                            *s = format!("{scheme}://{REDACTED}@{host}");
                        }
                    }
                } else {
                    redact(val);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

pub async fn show(State(state): State<AdminState>) -> Result<Json<Value>, AdminError> {
    let path = state.config_path.clone();
    let text = tokio::fs::read_to_string(&path)
        .await
        .map_err(|e| AdminError::internal("reading the config file", &e))?;
    let table: toml::Table =
        toml::from_str(&text).map_err(|e| AdminError::internal("parsing the config file", &e))?;
    let mut file =
        serde_json::to_value(table).map_err(|e| AdminError::internal("rendering", &e))?;
    redact(&mut file);
    let cfg = state.engine.config();
    let env: serde_json::Map<String, Value> = cfg
        .env_applied
        .iter()
        .map(|(k, v)| ((*k).to_string(), json!(v)))
        .collect();
    Ok(Json(json!({
        "path": path.display().to_string(),
        "file": file,
        "envApplied": env,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_and_paths_kept() {
        let mut v = json!({
            "store": { "hash_secret": "s3cret", "valkey_address": "redis://u:pw@h:6379", "hash_secret_file": "/p" },
            "jwt": { "secret": "x" },
            "admin": { "token_file": "/t" },
        });
        redact(&mut v);
        assert_eq!(v["store"]["hash_secret"], REDACTED);
        assert_eq!(v["store"]["hash_secret_file"], "/p");
        assert_eq!(v["store"]["valkey_address"], "redis://<redacted>@h:6379");
        assert_eq!(v["jwt"]["secret"], REDACTED);
        assert_eq!(v["admin"]["token_file"], "/t");
    }
}
