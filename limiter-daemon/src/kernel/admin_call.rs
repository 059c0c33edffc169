//! How `limiter-daemon kernel lock|unlock` reaches a running daemon: the admin API at the
//! config's `[admin] listen` with its token, so the store and the kernel change together.
//! `Ok(None)` means nothing listens there (the daemon is down): the caller then works on the
//! pins itself.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::config::admin::{GENERATED_TOKEN_FILE, TOKEN_ENV};
use crate::config::Config;

const TIMEOUT: Duration = Duration::from_secs(10);

/// A running daemon's admin API.
pub struct AdminTarget {
    pub addr: SocketAddr,
    token_source: std::path::PathBuf,
    token: Option<String>,
}

impl AdminTarget {
    /// The admin API the config names, `None` when it is turned off.
    pub fn from_config(cfg: &Config) -> Option<Self> {
        let addr = cfg.admin.listen?;
        let token_source = cfg
            .admin
            .token_file
            .clone()
            .unwrap_or_else(|| cfg.store.state_dir.join(GENERATED_TOKEN_FILE));
        Some(AdminTarget {
            addr,
            token_source,
            token: std::env::var(TOKEN_ENV)
                .ok()
                .filter(|t| !t.trim().is_empty()),
        })
    }

    fn token(&self) -> anyhow::Result<String> {
        if let Some(t) = &self.token {
            return Ok(t.trim().to_string());
        }
        read_token(&self.token_source)
    }

    /// Sends one request; `Ok(None)` when nothing listens (connection refused or timed out).
    pub fn call(
        &self,
        method: http::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> anyhow::Result<Option<(http::StatusCode, serde_json::Value)>> {
        if std::net::TcpStream::connect_timeout(&self.addr, Duration::from_secs(1)).is_err() {
            return Ok(None);
        }
        let token = self.token()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting a runtime for the admin call")?;
        let uri = format!("http://{}{path}", self.addr);
        rt.block_on(async move {
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            let mut b = http::Request::builder()
                .method(method)
                .uri(uri)
                .header(http::header::AUTHORIZATION, format!("Bearer {token}"));
            let bytes = match body {
                Some(v) => {
                    b = b.header(http::header::CONTENT_TYPE, "application/json");
                    Bytes::from(v.to_string())
                }
                None => Bytes::new(),
            };
            let resp = tokio::time::timeout(TIMEOUT, client.request(b.body(Full::new(bytes))?))
                .await
                .context("the admin API did not answer in time")??;
            let status = resp.status();
            let body = resp.into_body().collect().await?.to_bytes();
            let v = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
            Ok(Some((status, v)))
        })
    }
}

fn read_token(path: &Path) -> anyhow::Result<String> {
    Ok(std::fs::read_to_string(path)
        .with_context(|| {
            format!(
                "reading the admin token {} (or set {TOKEN_ENV})",
                path.display()
            )
        })?
        .trim()
        .to_string())
}
