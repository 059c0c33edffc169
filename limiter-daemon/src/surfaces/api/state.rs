//! What every API handler shares: the request's steps ([`Steps`]), the trusted peers and the
//! request limits; and the forwarding fields the API never believes.

use std::sync::Arc;

use http::{HeaderMap, HeaderName};
use ipnet::IpNet;

use crate::config::api_token::ApiToken;
use crate::config::http::HttpSettings;
use crate::edge::limits::HeaderLimits;
use crate::edge::steps::Steps;

/// Bounds on what an API request may make the daemon hold: the headers a `/v1/decide` body
/// describes or `/v1/auth` carries (the same limits as the proxy's), and the body itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiLimits {
    pub headers: HeaderLimits,
    /// `[http] api_max_body`: a `/v1/decide` body past this is not read further (413).
    pub max_body: usize,
}

impl ApiLimits {
    pub fn from_settings(s: &HttpSettings) -> Self {
        ApiLimits {
            headers: HeaderLimits {
                max_count: s.max_header_count.get(),
                max_bytes: s.max_header_bytes.get(),
            },
            max_body: s.api_max_body.get(),
        }
    }
}

impl Default for ApiLimits {
    fn default() -> Self {
        ApiLimits::from_settings(&HttpSettings::default())
    }
}

#[derive(Clone)]
pub struct ApiState {
    pub steps: Arc<Steps>,
    /// Peers whose client field (`X-Real-IP`, `X-Forwarded-For`) is believed on `/v1/auth`.
    pub trusted_peers: Arc<Vec<IpNet>>,
    pub limits: ApiLimits,
    /// `[http] api_token_file`: required on every route when set (see [`super::token`]).
    pub token: Option<ApiToken>,
}

/// Header fields that say who the client is. On `/v1/decide` and `/v1/auth` the client is
/// already resolved (the `ip` field, or `X-Real-IP` from a trusted peer), so these are removed
/// before the engine sees the headers: a client cannot re-route its own identity through them.
pub fn drop_forwarding(h: &mut HeaderMap) {
    for name in [
        HeaderName::from_static("x-forwarded-for"),
        HeaderName::from_static("forwarded"),
        HeaderName::from_static("x-real-ip"),
    ] {
        h.remove(name);
    }
}
