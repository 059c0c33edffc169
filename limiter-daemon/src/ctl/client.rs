//! The HTTP side of limiterctl: one request (or a walk through `nextCursor` pages) to the admin
//! API with the bearer token, over hyper's pooled client. A connection failure or a timeout is
//! an error (exit 3); any answer, 2xx or not, is returned.

use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::args::Request;
use super::target::Target;

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

async fn send(
    client: &HttpClient,
    t: &Target,
    req: &Request,
    path: &str,
) -> anyhow::Result<Answer> {
    let uri: http::Uri = format!("{}{path}", t.url)
        .parse()
        .with_context(|| format!("{:?} is not a URL", t.url))?;
    let body = match &req.body {
        Some(v) => Bytes::from(v.to_string()),
        None => Bytes::new(),
    };
    let mut b = http::Request::builder()
        .method(req.method.clone())
        .uri(uri)
        .header(http::header::AUTHORIZATION, format!("Bearer {}", t.token));
    if req.body.is_some() {
        b = b.header(http::header::CONTENT_TYPE, "application/json");
    }
    let r = b.body(Full::new(body)).context("building the request")?;
    let resp = tokio::time::timeout(TIMEOUT, client.request(r))
        .await
        .context("no answer in time")??;
    let status = resp.status();
    let bytes = tokio::time::timeout(TIMEOUT, resp.into_body().collect())
        .await
        .context("no answer in time")??
        .to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or_else(
        |_| serde_json::json!({ "detail": String::from_utf8_lossy(&bytes).into_owned() }),
    );
    Ok(Answer { status, body })
}

/// Sends `req`; a paged listing follows `nextCursor` and answers one `items` array.
pub async fn send_all(t: &Target, req: Request) -> anyhow::Result<Answer> {
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    if !req.paged {
        return send(&client, t, &req, &req.path).await;
    }
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            None => format!("{}?limit=1000", req.path),
            Some(c) => format!("{}?limit=1000&cursor={}", req.path, c.replace('/', "%2F")),
        };
        let a = send(&client, t, &req, &path).await?;
        if !a.ok() {
            return Ok(a);
        }
        if let Some(Value::Array(page)) = a.body.get("items") {
            items.extend(page.iter().cloned());
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
