//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, the protocol of
//! envoyproxy/ratelimit, so Envoy's `ratelimit` filter (and gateways built on Envoy) can use
//! the daemon in its place. The call's descriptors are read as one request
//! ([`crate::surfaces::grpc::descriptors`]) and decided like `/v1/decide`'s.
//!
//! - `overall_code`: `OK`, or `OVER_LIMIT` for the daemon's 429 (and for a delayed request
//!   past the held-request bounds, its 503). A scan delay is held before `OK` is answered
//!   (the filter's `timeout` must exceed `[quota] hard_delay_ms`).
//! - `statuses`: one per descriptor, all the same: the code, `current_limit` (the binding
//!   window: `name` its kind, `requests_per_unit` its limit, `unit` its length when that is a
//!   second, minute, hour or day, else `UNKNOWN`), `limit_remaining` and
//!   `duration_until_reset` (on `OVER_LIMIT`: 0 remaining, `Retry-After`).
//! - `response_headers_to_add`: the rate-limit fields (with `Retry-After` and the
//!   problem+json content type on `OVER_LIMIT`, whose `raw_body` is the problem document), so
//!   the client gets the same 429 as from the built-in proxy.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use http::header::CONTENT_LENGTH;
use http::HeaderMap;
use tonic::{Request, Response, Status};

use crate::edge::render::response::{binding_window, retry_after, write_headers};
use crate::edge::steps::Settled;
use crate::engine::decider::RequestView;
use crate::model::{Action, Decision};
use crate::surfaces::api::state::ApiState;
use crate::surfaces::grpc::access;
use crate::surfaces::grpc::descriptors::read;
use crate::surfaces::grpc::fields::header_values;
use crate::surfaces::grpc::invalid::FieldError;

/// The rate-limit service over the API's state; `route_key` is `[http] grpc_route_key`.
pub struct RateLimits {
    pub state: ApiState,
    pub route_key: String,
}

fn unit(window_secs: u64) -> Unit {
    match window_secs {
        1 => Unit::Second,
        60 => Unit::Minute,
        3600 => Unit::Hour,
        86_400 => Unit::Day,
        _ => Unit::Unknown,
    }
}

/// A descriptor's status for `d`: its binding window, as the rate-limit headers describe it.
pub fn status(d: &Decision, code: Code) -> DescriptorStatus {
    let over = code == Code::OverLimit;
    let w = binding_window(d);
    let reset = if over && d.action() == Action::Reject {
        Some(retry_after(d))
    } else {
        w.map(|w| w.reset_secs)
    };
    DescriptorStatus {
        code: code as i32,
        current_limit: w.map(|w| RateLimit {
            name: w.kind.as_str().to_string(),
            requests_per_unit: u32::try_from(w.limit).unwrap_or(u32::MAX),
            unit: unit(w.window_secs) as i32,
        }),
        limit_remaining: match w {
            Some(w) if !over => u32::try_from(w.remaining).unwrap_or(u32::MAX),
            _ => 0,
        },
        duration_until_reset: reset.map(|s| PbDuration {
            seconds: i64::try_from(s).unwrap_or(i64::MAX),
            nanos: 0,
        }),
        ..Default::default()
    }
}

/// The answer for `settled`, one status for each of `descriptors`.
pub fn answer(settled: Settled, descriptors: usize) -> RateLimitResponse {
    let (code, d, headers, body) = match settled {
        Settled::Allowed(d) => {
            let mut h = HeaderMap::new();
            write_headers(&d, &mut h);
            (Code::Ok, d, h, Vec::new())
        }
        Settled::Refused { decision, response } => {
            let (mut parts, body) = response.into_parts();
            parts.headers.remove(CONTENT_LENGTH);
            (Code::OverLimit, decision, parts.headers, body.to_vec())
        }
    };
    let s = status(&d, code);
    RateLimitResponse {
        overall_code: code as i32,
        statuses: vec![s; descriptors],
        response_headers_to_add: header_values(&headers),
        raw_body: body,
        ..Default::default()
    }
}

#[tonic::async_trait]
impl RateLimitService for RateLimits {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let remote = request.remote_addr();
        let req = request.into_inner();
        let call = read(&req, &self.route_key, self.state.limits.headers)
            .map_err(FieldError::into_status)?;
        let n = req.descriptors.len();
        drop(req);
        let a = &call.request;
        let view = RequestView {
            client: self.state.steps.resolve(a.ip, &a.headers),
            method: &a.method,
            path: &a.path,
            headers: &a.headers,
        };
        let line = access::start(&self.state, remote, &view);
        let settled = self.state.steps.settle(&view, call.cost).await;
        access::finish(&self.state, line, &settled);
        Ok(Response::new(answer(settled, n)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Reason, Tier, WindowKind, WindowState};

    fn window(kind: WindowKind, limit: u64, remaining: u64, secs: u64, reset: u64) -> WindowState {
        WindowState {
            kind,
            limit,
            remaining,
            window_secs: secs,
            reset_secs: reset,
        }
    }

    #[test]
    fn statuses_carry_the_binding_window() {
        let ok = Decision::builder(Tier::Anon, "id")
            .window(window(WindowKind::Burst, 3, 2, 60, 40))
            .window(window(WindowKind::Hourly, 100, 90, 3600, 1000))
            .build();
        let s = status(&ok, Code::Ok);
        let l = s.current_limit.clone().unwrap();
        assert_eq!(
            (l.name.as_str(), l.requests_per_unit, l.unit),
            ("burst", 3, Unit::Minute as i32)
        );
        assert_eq!(s.limit_remaining, 2);
        assert_eq!(s.duration_until_reset.unwrap().seconds, 40);
        let over = Decision::builder(Tier::Anon, "id")
            .window(window(WindowKind::Burst, 3, 0, 60, 40))
            .reject(Reason::Burst, 17)
            .build();
        let s = status(&over, Code::OverLimit);
        assert_eq!((s.code, s.limit_remaining), (Code::OverLimit as i32, 0));
        assert_eq!(s.duration_until_reset.unwrap().seconds, 17);
        assert_eq!(unit(86_400), Unit::Day);
        assert_eq!(unit(7), Unit::Unknown);
        // No window (an allow-listed caller, a route without limits): no limit to report.
        let free = Decision::builder(Tier::Anon, "id").build();
        assert!(status(&free, Code::Ok).current_limit.is_none());
    }
}
