//! Opening a tunnel: a bound checked (503 with `Retry-After` past it), the upgrade request sent
//! upstream on a connection of its own (never a pooled one: it will not come back), and, on
//! `101`, the client answered `101` with the rate-limit fields while the two upgraded
//! connections are joined on a task of their own. Any other answer is passed back as it came.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONNECTION, HOST, RETRY_AFTER, UPGRADE};
use http::uri::PathAndQuery;
use http::{HeaderValue, Request, Response, StatusCode, Uri, Version};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use crate::edge::h1::hop::{append_forwarded_for, strip_hop_by_hop};
use crate::edge::render::problem::Problem;
use crate::edge::render::response::write_headers;
use crate::identity::client_ip::Client;
use crate::model::Decision;
use crate::proxy::body::{full, ProxyBody};
use crate::proxy::hyper::{upstream_failure, ProxyState};
use crate::proxy::tunnel::join::join;
use crate::proxy::tunnel::registry::Caller;

/// Seconds a caller refused a tunnel is told to wait: tunnels are long-lived, slots free slowly.
const RETRY_SECS: u64 = 30;
/// Largest body of a non-`101` answer to an upgrade passed back (a 426 or 403 page).
const MAX_REFUSAL_BODY: usize = 64 * 1024;
/// Time to read that body.
const REFUSAL_BODY_TIME: Duration = Duration::from_secs(5);

/// Answers the decided upgrade request `req` from `peer`, sent by `client`.
pub async fn open(
    state: &ProxyState,
    (peer, client): (IpAddr, Client),
    decision: Decision,
    mut req: Request<Incoming>,
) -> Response<ProxyBody> {
    let caller = Caller {
        peer,
        client,
        method: req.method().clone(),
        path: req.uri().path().to_owned(),
        headers: req.headers().clone(),
    };
    let Some(permit) = state.tunnels.try_open(&decision.identity, caller) else {
        tracing::debug!(identity = %decision.identity, "tunnel bound reached");
        return overflow(&decision).map(full);
    };
    let client_side = hyper::upgrade::on(&mut req);
    let (mut parts, _empty) = req.into_parts();
    let asked = parts.headers.get(UPGRADE).cloned();
    strip_hop_by_hop(&mut parts.headers);
    append_forwarded_for(&mut parts.headers, peer);
    if let Some(v) = asked {
        parts.headers.insert(UPGRADE, v);
    }
    parts
        .headers
        .insert(CONNECTION, HeaderValue::from_static("upgrade"));
    if !parts.headers.contains_key(HOST) {
        if let Some(h) = state.upstream.host_header() {
            parts.headers.insert(HOST, h.clone());
        }
    }
    parts.uri = Uri::from(
        parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/")),
    );
    parts.version = Version::HTTP_11;
    let up_req = Request::from_parts(parts, Empty::<Bytes>::new());

    let upstream = &state.upstream;
    let exchange = async {
        let stream = upstream.connect_stream().await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| upstream.failed(Box::new(e)))?;
        tokio::spawn(async move {
            if let Err(err) = conn.with_upgrades().await {
                tracing::debug!(error = %err, "upstream tunnel connection ended with an error");
            }
        });
        sender
            .send_request(up_req)
            .await
            .map_err(|e| upstream.failed(Box::new(e)))
    };
    let mut resp = match upstream.within_response_timeout(exchange).await {
        Ok(resp) => resp,
        Err(err) => return upstream_failure(err, &decision).map(full),
    };
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return passed_back(resp, &decision).await;
    }
    let upstream_side = hyper::upgrade::on(&mut resp);
    let (mut parts, _empty) = resp.into_parts();
    let agreed = parts.headers.get(UPGRADE).cloned();
    strip_hop_by_hop(&mut parts.headers);
    if let Some(v) = agreed {
        parts.headers.insert(UPGRADE, v);
    }
    parts
        .headers
        .insert(CONNECTION, HeaderValue::from_static("upgrade"));
    write_headers(&decision, &mut parts.headers);
    let idle = state.tunnel_idle;
    let grace_over = state.steps.grace_over.clone();
    let tunnels = Arc::clone(&state.tunnels);
    tunnels.tasks.spawn(async move {
        match tokio::join!(client_side, upstream_side) {
            (Ok(c), Ok(u)) => join(c, u, permit, idle, grace_over).await,
            (c, u) => tracing::debug!(
                client = ?c.err(),
                upstream = ?u.err(),
                "an upgraded connection was lost before the tunnel opened"
            ),
        }
    });
    Response::from_parts(parts, full(Bytes::new()))
}

/// The upstream declined the upgrade: its answer goes back as it came (hop-by-hop fields
/// dropped, the rate-limit fields added), its small body read whole.
async fn passed_back(resp: Response<Incoming>, d: &Decision) -> Response<ProxyBody> {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(http::header::CONTENT_LENGTH);
    write_headers(d, &mut parts.headers);
    let read = tokio::time::timeout(
        REFUSAL_BODY_TIME,
        Limited::new(body, MAX_REFUSAL_BODY).collect(),
    )
    .await;
    let bytes = match read {
        Ok(Ok(collected)) => collected.to_bytes(),
        _ => Bytes::new(),
    };
    Response::from_parts(parts, full(bytes))
}

/// `503` for an upgrade past `[http] max_tunnels` or `max_tunnels_per_identity`.
fn overflow(d: &Decision) -> Response<Bytes> {
    let mut resp = Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        None,
        format!(
            "Too many tunnels (WebSocket connections) are open, for this caller or in all. \
             Close one or retry in {RETRY_SECS} s."
        ),
    )
    .with("retryAfter", RETRY_SECS)
    .into_response();
    write_headers(d, resp.headers_mut());
    resp.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(RETRY_SECS));
    resp
}
