//! The reverse proxy's request path under hyper's server (for requests
//! [`crate::proxy::front`]'s own loop does not serve), through the steps every surface
//! shares ([`crate::edge::steps`]): check the head's limits, decide, then reject (429), hold
//! for a scan delay (bounded; 503 past the bound), or forward to the upstream with hop-by-hop
//! fields stripped and `X-Forwarded-For` appended. Bodies are streamed, never buffered; the
//! upstream's status, headers and body pass through, with the rate-limit headers added.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONNECTION, HOST};
use http::{Request, Response, Version};
use hyper::body::Incoming;

use crate::edge::access_log::record::mark;
use crate::edge::access_log::Verdict;
use crate::edge::h1::hop::{append_forwarded_for, strip_hop_by_hop};
use crate::edge::limits::{too_large, HeaderLimits};
use crate::edge::render::negotiate::Format;
use crate::edge::render::problem;
use crate::edge::render::response::write_headers;
pub use crate::edge::steps::Admission;
use crate::edge::steps::Steps;
use crate::engine::decider::RequestView;
use crate::identity::client_ip::Client;
use crate::model::Decision;
use crate::proxy::body::{full, streamed, ProxyBody};
use crate::proxy::request_rules;
use crate::proxy::self_service;
use crate::proxy::tunnel::registry::Tunnels;
use crate::proxy::tunnel::{self, Upgrade};
use crate::proxy::upstream::client::Upstream;
use crate::proxy::upstream::error::UpstreamError;

/// Everything the proxy needs per request, shared by all of one thread's connections.
pub struct ProxyState {
    pub steps: Steps,
    pub upstream: Arc<Upstream>,
    pub limits: HeaderLimits,
    /// `[http] self_service_path` (`None`: off).
    pub self_service: Option<Arc<str>>,
    /// Open tunnels (upgraded connections), shared by every proxy thread.
    pub tunnels: Arc<Tunnels>,
    /// `[http] tunnel_idle_timeout`.
    pub tunnel_idle: std::time::Duration,
    /// HTTP/2 stream counters, shared by every proxy thread.
    pub h2: Arc<crate::proxy::h2::H2Counters>,
}

/// Phases 2 and 3 on a proxied request: shed, or decided, then refused, held (within the
/// bounds) or let through; the self-service path is answered here instead, undecided.
pub async fn admit(state: &ProxyState, view: &RequestView<'_>) -> Admission {
    if let Some(resp) =
        self_service::answer(state.self_service.as_deref(), &*state.steps.decider, view)
    {
        return Admission::Answer(resp);
    }
    let slot = match state.steps.shed(view) {
        Ok(slot) => slot,
        Err(resp) => return Admission::Answer(resp),
    };
    let d = state.steps.decide(view, None).await;
    // A refusal carries its verdict to the access log's line (with the log on).
    let verdict = state.steps.access_log.is_on().then(|| Verdict::of(&d));
    match state.steps.admit(d, slot, Format::of(view.headers)) {
        Admission::Answer(resp) => Admission::Answer(mark(resp, verdict)),
        admitted => admitted,
    }
}

/// Answers one request from `peer` (the TCP peer's address), sent by `client` (resolved from
/// it). `decided`: the request was already checked and decided (and any hold waited out)
/// before the connection reached hyper.
pub async fn handle(
    state: &ProxyState,
    (peer, client): (IpAddr, Client),
    mut req: Request<Incoming>,
    decided: Option<Admission>,
    https: bool,
) -> Response<ProxyBody> {
    if let Some(resp) = broken_rule(&req) {
        return resp.map(full);
    }
    let admission = match decided {
        Some(admission) => admission,
        None => {
            if let Err(err) = state.limits.check(req.headers()) {
                tracing::debug!(%peer, %err, "request head over limits");
                return too_large(err).map(full);
            }
            let view = RequestView {
                client,
                method: req.method(),
                path: req.uri().path(),
                headers: req.headers(),
            };
            admit(state, &view).await
        }
    };
    let (decision, slot) = match admission {
        Admission::Forward(d, slot) => (d, slot),
        // If the client goes away, hyper drops this future and the permit with it.
        Admission::Hold(d, permit) => match state.steps.hold_then_reshed(&d, permit).await {
            Ok(slot) => (d, slot),
            Err(resp) => return resp.map(full),
        },
        Admission::Answer(resp) => return resp.map(full),
    };
    // For the access log's line (finished in `front`), when it is on.
    let verdict = state
        .steps
        .access_log
        .is_on()
        .then(|| Verdict::of(&decision));
    if https {
        // Set, not appended: only this hop knows how the client came in.
        req.headers_mut().insert(
            http::header::HeaderName::from_static("x-forwarded-proto"),
            http::HeaderValue::from_static("https"),
        );
    }
    // `h2c` is dropped with the other hop-by-hop fields below: the request is answered over
    // HTTP/1.1, never tunnelled.
    if tunnel::upgrade_of(&req) == Upgrade::Tunnel {
        // A tunnel lives for as long as its client likes: it holds no slot.
        slot.cancel();
        return mark(
            tunnel::open::open(state, (peer, client), decision, req).await,
            verdict,
        );
    }

    let (mut parts, body) = req.into_parts();
    let client_version = parts.version;
    strip_hop_by_hop(&mut parts.headers);
    if client_version == Version::HTTP_2 && !parts.headers.contains_key(HOST) {
        // HTTP/2 carries the host in `:authority`; HTTP/1.1 upstreams need it as `Host`.
        if let Some(v) = parts
            .uri
            .authority()
            .and_then(|a| http::HeaderValue::from_str(a.as_str()).ok())
        {
            parts.headers.insert(HOST, v);
        }
    }
    append_forwarded_for(&mut parts.headers, peer);
    // Upstream connections are HTTP/1.1 keep-alive whatever the client spoke.
    parts.version = Version::HTTP_11;
    let resp = match state.upstream.send(Request::from_parts(parts, body)).await {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            // Answer in the client's protocol version, whatever the upstream spoke.
            parts.version = client_version;
            strip_hop_by_hop(&mut parts.headers);
            state.steps.render(&decision, &mut parts.headers);
            Response::from_parts(parts, streamed(body))
        }
        Err(err) => upstream_failure(err, &decision).map(full),
    };
    // The upstream has answered (its head): the slot is free, the latency sampled.
    drop(slot);
    mark(resp, verdict)
}

/// The answer for a request that breaks one of [`request_rules`], with `Connection: close`
/// (the own loop closes after such a request too: what follows it cannot be trusted).
fn broken_rule(req: &Request<Incoming>) -> Option<Response<Bytes>> {
    let hosts = req.headers().get_all(HOST).iter().map(|v| v.as_bytes());
    let target = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len())
        + req.uri().authority().map_or(0, |a| a.as_str().len());
    let mut resp = request_rules::refused_method(req.method())
        .or_else(|| request_rules::host_problem(req.version() == Version::HTTP_11, hosts))
        .or_else(|| {
            (target > request_rules::MAX_TARGET_BYTES)
                .then(|| request_rules::target_too_long(target))
        })
        .or_else(|| request_rules::path_problem(req.uri().path()))?;
    // HTTP/2 has no `Connection` field: a broken stream ends alone.
    if req.version() < Version::HTTP_2 {
        resp.headers_mut()
            .insert(CONNECTION, http::HeaderValue::from_static("close"));
    }
    Some(resp)
}

/// The 502 or 504 for a failed exchange, carrying `d`'s rate-limit headers: the request was
/// metered all the same, so the caller sees what it has left.
pub fn upstream_failure(err: UpstreamError, d: &Decision) -> Response<Bytes> {
    // The cause as text ("" when none), not `Option`'s debug form.
    let source = std::error::Error::source(&err).map_or_else(String::new, |s| s.to_string());
    if let UpstreamError::ClientBody { .. } = err {
        tracing::debug!(error = %err, %source, "request body broke");
    } else {
        tracing::warn!(error = %err, %source, "forwarding failed");
    }
    let mut resp = match err {
        UpstreamError::ClientBody { .. } => problem::bad_request(
            "The request body is malformed or was cut short (check its chunked framing or \
             Content-Length); it was not passed on.",
        ),
        UpstreamError::Timeout { timeout, .. } => problem::gateway_timeout(format!(
            "The upstream application did not answer within {} s. Retry later.",
            timeout.as_secs_f64()
        )),
        UpstreamError::Unreachable { .. } => {
            problem::bad_gateway("The upstream application cannot be reached. Retry later.")
        }
        UpstreamError::Failed { .. } => {
            problem::bad_gateway("The upstream application broke off the exchange. Retry later.")
        }
    };
    write_headers(d, resp.headers_mut());
    resp
}
