//! `envoy.service.auth.v3.Authorization/Check`: Envoy's gRPC ext_authz asks about each request
//! before serving it.
//!
//! - The request: the `CheckRequest`'s `attributes`: `source.address` is the peer Envoy saw,
//!   taken as the proxy takes its TCP peer (a `[identity] trusted_proxies` peer's
//!   `X-Forwarded-For` is walked, anyone else's ignored); `request.http` gives the method, the
//!   path (its query dropped) and the headers (`headers`, or `header_map` when Envoy sends raw
//!   headers), bounded by `[http] max_header_count` / `max_header_bytes`.
//! - Allow: `OkHttpResponse` whose `response_headers_to_add` are the rate-limit fields the
//!   client sees (`x-ratelimit-*`, `RateLimit`, `RateLimit-Policy`), after any scan delay
//!   has been held here (Envoy's ext_authz `timeout` must exceed `[quota] hard_delay_ms`).
//! - Deny: `DeniedHttpResponse` with the daemon's status (429; 503 past the held-request
//!   bounds), headers and problem+json body, which Envoy hands to the client as they are;
//!   the call's status is `RESOURCE_EXHAUSTED` (`UNAVAILABLE` for the 503).
//! - A path with a dot segment in some upstream's reading (`model::request_path::refusal`) is
//!   denied with a 400 problem, never decided: Envoy's route and its upstream's may differ.
//!   A denial, not `INVALID_ARGUMENT`, so an ext_authz filter that fails open on errors still
//!   keeps it out.
//! - A call missing what the request needs gets `INVALID_ARGUMENT` naming the field.

use std::net::IpAddr;

use envoy_types::pb::envoy::config::core::v3::address::Address;
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::envoy::service::auth::v3::authorization_server::Authorization;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{
    CheckRequest, CheckResponse, DeniedHttpResponse, OkHttpResponse,
};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, Method, StatusCode};
use tonic::{Request, Response, Status};

use crate::edge::limits::HeaderLimits;
use crate::edge::render::problem::Problem;
use crate::edge::render::response::write_headers;
use crate::edge::steps::Settled;
use crate::engine::decider::RequestView;
use crate::model::request_path;
use crate::surfaces::api::state::ApiState;
use crate::surfaces::grpc::access;
use crate::surfaces::grpc::fields::{header_options, Fields};
use crate::surfaces::grpc::invalid::FieldError;

/// The ext_authz service over the API's state (decider, hold bounds, limits).
pub struct Check {
    pub state: ApiState,
}

/// The request a `CheckRequest` describes.
#[derive(Debug)]
pub struct Asked {
    pub peer: IpAddr,
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
}

const HTTP: &str = "attributes.request.http";

/// Reads the original request from `req`'s attributes.
pub fn asked(req: &CheckRequest, limits: HeaderLimits) -> Result<Asked, FieldError> {
    let attrs = req
        .attributes
        .as_ref()
        .ok_or_else(|| FieldError::new("attributes", "missing: the request is not described"))?;
    let source = attrs
        .source
        .as_ref()
        .and_then(|p| p.address.as_ref())
        .and_then(|a| a.address.as_ref())
        .ok_or_else(|| {
            FieldError::new(
                "attributes.source.address",
                "missing: the peer Envoy saw is needed to know the caller",
            )
        })?;
    let Address::SocketAddress(sock) = source else {
        return Err(FieldError::new(
            "attributes.source.address",
            "not a socket address (a pipe or an internal address names no caller)",
        ));
    };
    let peer: IpAddr = sock.address.parse().map_err(|_| {
        FieldError::new(
            "attributes.source.address.socket_address.address",
            format!("{:?} is not an IPv4 or IPv6 address", sock.address),
        )
    })?;
    let http = attrs
        .request
        .as_ref()
        .and_then(|r| r.http.as_ref())
        .ok_or_else(|| FieldError::new(HTTP, "missing: the HTTP request is not described"))?;
    let method = if http.method.is_empty() {
        Method::GET
    } else {
        Method::from_bytes(http.method.as_bytes()).map_err(|_| {
            FieldError::new(
                format!("{HTTP}.method"),
                format!("{:?} is not an HTTP method", http.method),
            )
        })?
    };
    if !http.path.starts_with('/') {
        return Err(FieldError::new(
            format!("{HTTP}.path"),
            format!("{:?} must start with `/`", http.path),
        ));
    }
    let path = http.path.split('?').next().unwrap_or("/").to_string();
    let mut fields = Fields::new(limits, "attributes.request.http.headers");
    let raw = http.header_map.as_ref().map(|m| m.headers.as_slice());
    let entries: Box<dyn Iterator<Item = (&str, &[u8])>> = match raw {
        Some(raw) if http.headers.is_empty() => Box::new(raw.iter().map(|h| {
            let v = if h.raw_value.is_empty() {
                h.value.as_bytes()
            } else {
                h.raw_value.as_slice()
            };
            (h.key.as_str(), v)
        })),
        _ => Box::new(http.headers.iter().map(|(k, v)| (k.as_str(), v.as_bytes()))),
    };
    for (name, value) in entries {
        // Pseudo-headers (`:path`, `:method`, `:authority`) are the fields above.
        if name.starts_with(':') {
            continue;
        }
        let name = name.to_ascii_lowercase();
        fields.push(&name, value, |_| format!("{HTTP}.headers.{name}"))?;
    }
    Ok(Asked {
        peer: crate::model::address::canonical_ip(peer),
        method,
        path,
        headers: fields.into_map(),
    })
}

fn rpc_status(code: tonic::Code) -> Option<RpcStatus> {
    Some(RpcStatus {
        code: code as i32,
        ..Default::default()
    })
}

/// The answer for `settled`: an allow with the rate-limit fields, or the daemon's refusal.
pub fn answer(settled: Settled) -> CheckResponse {
    match settled {
        Settled::Allowed(d) => {
            let mut h = HeaderMap::new();
            write_headers(&d, &mut h);
            CheckResponse {
                status: rpc_status(tonic::Code::Ok),
                http_response: Some(HttpResponse::OkResponse(OkHttpResponse {
                    response_headers_to_add: header_options(&h),
                    ..Default::default()
                })),
                ..Default::default()
            }
        }
        Settled::Refused { response, .. } => denied(response),
    }
}

/// A denial carrying `response` (status, headers, body) for Envoy to send to the client.
fn denied(response: http::Response<bytes::Bytes>) -> CheckResponse {
    let (mut parts, body) = response.into_parts();
    // Envoy frames the body it sends itself.
    parts.headers.remove(CONTENT_LENGTH);
    let code = match parts.status {
        StatusCode::TOO_MANY_REQUESTS => tonic::Code::ResourceExhausted,
        StatusCode::BAD_REQUEST => tonic::Code::PermissionDenied,
        _ => tonic::Code::Unavailable,
    };
    CheckResponse {
        status: rpc_status(code),
        http_response: Some(HttpResponse::DeniedResponse(DeniedHttpResponse {
            status: Some(HttpStatus {
                code: i32::from(parts.status.as_u16()),
            }),
            headers: header_options(&parts.headers),
            body: String::from_utf8_lossy(&body).into_owned(),
        })),
        ..Default::default()
    }
}

#[tonic::async_trait]
impl Authorization for Check {
    async fn check(
        &self,
        request: Request<CheckRequest>,
    ) -> Result<Response<CheckResponse>, Status> {
        let remote = request.remote_addr();
        let req = request.into_inner();
        let a = asked(&req, self.state.limits.headers).map_err(FieldError::into_status)?;
        drop(req);
        if let Some(refusal) = request_path::refusal(&a.path) {
            let p = Problem::new(StatusCode::BAD_REQUEST, None, refusal.detail())
                .with("field", format!("{HTTP}.path"));
            return Ok(Response::new(denied(p.into_response())));
        }
        let view = RequestView {
            client: self.state.steps.decider.resolve(a.peer, &a.headers),
            method: &a.method,
            path: &a.path,
            headers: &a.headers,
        };
        let line = access::start(&self.state, remote, &view);
        let settled = self.state.steps.settle(&view, None).await;
        access::finish(&self.state, line, &settled);
        Ok(Response::new(answer(settled)))
    }
}

#[cfg(test)]
mod tests;
