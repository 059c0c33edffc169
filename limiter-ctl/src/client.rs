//! The HTTP side of limiterctl: one request (or a walk through `nextCursor` pages) to the admin
//! API with the bearer token, over hyper's pooled client. A connection failure or a timeout is
//! an error (exit 3); any answer, 2xx or not, is returned.
//!
//! The token goes only to a server recognised as the admin API: a first request without it
//! must be answered with the admin API's marker (the 401 carries it), and every answer after
//! must carry it too, as JSON of the admin API's shape ([`limiter_common::admin_marker`]).
//! Anything else is [`NotAdminApi`] (exit 3), and the token was never sent to it.

use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::args::Request;
use super::target::Target;
use limiter_common::admin_marker::{self, NotAdmin};

/// How long one request may take before the daemon counts as unreachable.
pub const TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug)]
pub struct Answer {
    pub status: http::StatusCode,
    pub body: Value,
}

impl Answer {
    pub fn ok(&self) -> bool {
        self.status.is_success()
    }
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// The server at the target answered, but not as the limiter's admin API.
#[derive(Debug, thiserror::Error)]
#[error("not a limiter admin API ({why}); the admin token was not sent to it")]
pub struct NotAdminApi {
    pub why: NotAdmin,
}

/// The probe the token waits for: the path the operator page polls, asked without the token.
pub const PROBE_PATH: &str = "/admin/v1/stats";

async fn exchange(
    client: &HttpClient,
    r: http::Request<Full<Bytes>>,
) -> anyhow::Result<(http::StatusCode, http::HeaderMap, Bytes)> {
    let resp = tokio::time::timeout(TIMEOUT, client.request(r))
        .await
        .context("no answer in time")??;
    let (parts, body) = resp.into_parts();
    let bytes = tokio::time::timeout(TIMEOUT, body.collect())
        .await
        .context("no answer in time")??
        .to_bytes();
    Ok((parts.status, parts.headers, bytes))
}

fn uri(t: &Target, path: &str) -> anyhow::Result<http::Uri> {
    format!("{}{path}", t.url)
        .parse()
        .with_context(|| format!("{:?} is not a URL", t.url))
}

/// Asks the target without the token; `Err(NotAdminApi)` unless the admin API answers.
async fn probe(client: &HttpClient, t: &Target) -> anyhow::Result<()> {
    let r = http::Request::get(uri(t, PROBE_PATH)?)
        .body(Full::new(Bytes::new()))
        .context("building the request")?;
    let (_, headers, _) = exchange(client, r).await?;
    admin_marker::probe_answer(&headers).map_err(|why| NotAdminApi { why }.into())
}

async fn send(
    client: &HttpClient,
    t: &Target,
    req: &Request,
    path: &str,
) -> anyhow::Result<Answer> {
    let body = match &req.body {
        Some(v) => Bytes::from(v.to_string()),
        None => Bytes::new(),
    };
    let mut b = http::Request::builder()
        .method(req.method.clone())
        .uri(uri(t, path)?)
        .header(http::header::AUTHORIZATION, format!("Bearer {}", t.token));
    if req.body.is_some() {
        b = b.header(http::header::CONTENT_TYPE, "application/json");
    }
    let r = b.body(Full::new(body)).context("building the request")?;
    let (status, headers, bytes) = exchange(client, r).await?;
    let body = admin_marker::answer(status, &headers, &bytes).map_err(|why| NotAdminApi { why })?;
    Ok(Answer { status, body })
}

/// A connection pool to a target already recognised as the admin API (probed once), for
/// commands that make many requests (`top` polls every 2 s).
pub struct Session {
    client: HttpClient,
    target: Target,
}

impl Session {
    /// Probes the target without the token; `Err(NotAdminApi)` unless the admin API answers.
    pub async fn connect(target: &Target) -> anyhow::Result<Session> {
        let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
        probe(&client, target).await?;
        Ok(Session {
            client,
            target: target.clone(),
        })
    }

    /// Sends `req` (one page; `paged` is followed as in [`send_all`]).
    pub async fn send(&self, req: &Request) -> anyhow::Result<Answer> {
        send_paged(&self.client, &self.target, req).await
    }
}

/// Sends `req`, once the target is recognised as the admin API; a paged listing follows
/// `nextCursor` and answers one `items` array.
pub async fn send_all(t: &Target, req: Request) -> anyhow::Result<Answer> {
    Session::connect(t).await?.send(&req).await
}

async fn send_paged(client: &HttpClient, t: &Target, req: &Request) -> anyhow::Result<Answer> {
    if !req.paged {
        return send(client, t, req, &req.path).await;
    }
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            None => format!("{}?limit=1000", req.path),
            Some(c) => format!("{}?limit=1000&cursor={}", req.path, c.replace('/', "%2F")),
        };
        let a = send(client, t, req, &path).await?;
        if !a.ok() {
            return Ok(a);
        }
        match a.body.get("items") {
            Some(Value::Array(page)) => items.extend(page.iter().cloned()),
            _ => {
                return Err(NotAdminApi {
                    why: NotAdmin::NotObject,
                }
                .into())
            }
        }
        match a.body.get("nextCursor").and_then(Value::as_str) {
            Some(c) => cursor = Some(c.to_string()),
            None => {
                return Ok(Answer {
                    status: a.status,
                    body: serde_json::json!({ "items": items, "nextCursor": null }),
                })
            }
        }
    }
}
