//! How `limiter-daemon kernel lock|unlock` reaches a running daemon: the admin API at the
//! config's `[admin] listen` with its token, so the store and the kernel change together.
//! `Ok(None)` means nothing listens there (the daemon is down): the caller then works on the
//! pins itself. The token goes only to a server that answers a tokenless probe as the admin
//! API does ([`crate::model::admin_marker`]); anything else there is an error.

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
use crate::model::admin_marker;

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
        let addr = self.addr;
        let not_admin = move |why: admin_marker::NotAdmin| {
            anyhow::anyhow!(
                "what answers at {addr} ([admin] listen) is not a limiter admin API ({why}); \
                 the admin token was not sent to it"
            )
        };
        rt.block_on(async move {
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            let probe = http::Request::get(format!("http://{addr}/admin/v1/stats"))
                .body(Full::new(Bytes::new()))?;
            let resp = tokio::time::timeout(TIMEOUT, client.request(probe))
                .await
                .context("the admin API did not answer in time")??;
            admin_marker::probe_answer(resp.headers()).map_err(not_admin)?;
            drop(resp.into_body().collect().await?);
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
            let (parts, body) = resp.into_parts();
            let body = body.collect().await?.to_bytes();
            let v = admin_marker::answer(parts.status, &parts.headers, &body).map_err(not_admin)?;
            Ok(Some((parts.status, v)))
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
