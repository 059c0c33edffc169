//! Where limiterctl sends requests and with which token: `--url`/`--token`, else
//! `LIMITER_ADMIN_URL`/`LIMITER_ADMIN_TOKEN` (clap reads both), else the local config's
//! `[admin] listen` and its token file or `<state_dir>/admin-token`.

use anyhow::Context as _;

use super::args::Conn;
use crate::config::{env_from_process, Config};

#[derive(Clone, Debug)]
pub struct Target {
    /// Base URL without a trailing `/`.
    pub url: String,
    pub token: String,
}

pub fn resolve(conn: &Conn) -> anyhow::Result<Target> {
    let cfg = || {
        Config::load(&conn.config, &env_from_process()).with_context(|| {
            format!(
                "no --url/--token (or LIMITER_ADMIN_URL/LIMITER_ADMIN_TOKEN) and the config {} cannot be used",
                conn.config.display()
            )
        })
    };
    let mut loaded: Option<Config> = None;
    let url = match &conn.url {
        Some(u) => u.trim_end_matches('/').to_string(),
        None => {
            let c = loaded.insert(cfg()?);
            let addr = c
                .admin
                .listen
                .context("the config turns the admin API off (admin.listen = \"\")")?;
            format!("http://{addr}")
        }
    };
    let token = match &conn.token {
        Some(t) => t.trim().to_string(),
        None => {
            let c = match loaded.take() {
                Some(c) => c,
                None => cfg()?,
            };
            let path = c
                .admin
                .token_file
                .clone()
                .unwrap_or_else(|| crate::admin::token::state_file(&c));
            std::fs::read_to_string(&path)
                .with_context(|| format!("reading the admin token from {}", path.display()))?
                .trim()
                .to_string()
        }
    };
    Ok(Target { url, token })
}
