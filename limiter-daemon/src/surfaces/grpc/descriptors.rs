//! A `ShouldRateLimit` call read as one request: its descriptors' entries map onto the
//! engine's view, so Envoy's `rate_limits` actions configure what the daemon sees.
//!
//! | entry key | Envoy action | becomes |
//! |---|---|---|
//! | `remote_address` | `remote_address` | the caller (required; the client Envoy resolved) |
//! | `[http] grpc_route_key` (`path`) | `request_headers` `:path` | the route path (route rules) |
//! | `method` | `request_headers` `:method` | the method (default GET) |
//! | anything else | `request_headers` (`x-api-key`, `authorization`, `cookie`) | a request header of that name |
//!
//! Every descriptor of a call describes the same request, so the call gets one decision and
//! each descriptor the same status (envoyproxy/ratelimit answers one per descriptor). Entries
//! may repeat across descriptors; conflicting values (two addresses) are refused.
//!
//! Cost: a descriptor's `hits_addend`, else the request's, else the route's `cost`. The
//! request-level field is a plain `uint32`, so 0 and unset are one on the wire (Envoy sends 0
//! unless told otherwise) and 0 there means the route's cost; a descriptor's is a wrapper, so
//! an explicit 0 there is refused, as is anything over [`MAX_HITS_ADDEND`], a negative hit
//! (`is_negative_hits`: the daemon gives nothing back) and a `limit` override (limits come from
//! the daemon's config). Errors name the field as the proto does.

use std::net::IpAddr;
use std::num::NonZeroU32;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use http::Method;

use crate::config::grpc::{METHOD_KEY, REMOTE_ADDRESS_KEY};
use crate::edge::limits::HeaderLimits;
use crate::surfaces::api::decide_body::Described;
use crate::surfaces::api::state::drop_forwarding;
use crate::surfaces::grpc::fields::{Fields, Part};
use crate::surfaces::grpc::invalid::FieldError;

/// Most units one call may count: more is a mistake (a byte count passed as hits), not a
/// request, and would spend a day's quota at once.
pub const MAX_HITS_ADDEND: u64 = 1_000_000;

/// The request a call describes (as a `/v1/decide` body would), and what it costs.
#[derive(Debug)]
pub struct Call {
    pub request: Described,
    /// `None`: the route's cost.
    pub cost: Option<NonZeroU32>,
}

/// One value every descriptor must agree on.
struct Agreed<T> {
    value: Option<T>,
}

impl<T: PartialEq> Agreed<T> {
    fn set(&mut self, v: T, at: impl Fn() -> String) -> Result<(), FieldError> {
        match &self.value {
            Some(old) if *old != v => Err(FieldError::new(
                at(),
                "differs from an earlier descriptor's: every descriptor of a call describes \
                 the same request",
            )),
            Some(_) => Ok(()),
            None => {
                self.value = Some(v);
                Ok(())
            }
        }
    }
}

fn cost(units: u64, at: impl Fn() -> String) -> Result<NonZeroU32, FieldError> {
    if units > MAX_HITS_ADDEND {
        return Err(FieldError::new(
            at(),
            format!("{units} is more than the {MAX_HITS_ADDEND} units one call may count"),
        ));
    }
    u32::try_from(units)
        .ok()
        .and_then(NonZeroU32::new)
        .ok_or_else(|| {
            FieldError::new(
                at(),
                "0 counts nothing; leave it unset for the route's cost",
            )
        })
}

/// Reads `req`; `route_key` is `[http] grpc_route_key`, `limits` bound the header entries.
pub fn read(
    req: &RateLimitRequest,
    route_key: &str,
    limits: HeaderLimits,
) -> Result<Call, FieldError> {
    if req.descriptors.is_empty() {
        return Err(FieldError::new(
            "descriptors",
            "at least one descriptor is needed, with the caller as a `remote_address` entry",
        ));
    }
    let mut ip = Agreed { value: None };
    let mut path = Agreed { value: None };
    let mut method = Agreed { value: None };
    let mut units = Agreed { value: None };
    let mut fields = Fields::new(limits, "descriptors");
    for (i, d) in req.descriptors.iter().enumerate() {
        let at = |name: &str| format!("descriptors[{i}].{name}");
        if d.limit.is_some() {
            return Err(FieldError::new(
                at("limit"),
                "limit overrides are not taken: the daemon's config sets the limits",
            ));
        }
        if d.is_negative_hits {
            return Err(FieldError::new(
                at("is_negative_hits"),
                "the daemon gives no units back",
            ));
        }
        if let Some(h) = &d.hits_addend {
            units.set(cost(h.value, || at("hits_addend"))?, || at("hits_addend"))?;
        }
        for (j, e) in d.entries.iter().enumerate() {
            let entry = |part: &str| format!("descriptors[{i}].entries[{j}].{part}");
            let key = e.key.as_str();
            if key == REMOTE_ADDRESS_KEY {
                let a: IpAddr = e.value.parse().map_err(|_| {
                    FieldError::new(
                        entry("value"),
                        format!("{:?} is not an IPv4 or IPv6 address", e.value),
                    )
                })?;
                ip.set(crate::model::address::canonical_ip(a), || entry("value"))?;
            } else if key == route_key {
                if !e.value.starts_with('/') {
                    return Err(FieldError::new(
                        entry("value"),
                        format!("the route path {:?} must start with `/`", e.value),
                    ));
                }
                let p = e.value.split('?').next().unwrap_or("/").to_string();
                path.set(p, || entry("value"))?;
            } else if key == METHOD_KEY {
                let m = Method::from_bytes(e.value.as_bytes()).map_err(|_| {
                    FieldError::new(
                        entry("value"),
                        format!("{:?} is not an HTTP method", e.value),
                    )
                })?;
                method.set(m, || entry("value"))?;
            } else if key.is_empty() {
                return Err(FieldError::new(entry("key"), "an entry needs a key"));
            } else {
                let name = key.to_ascii_lowercase();
                if !fields.has(&name, e.value.as_bytes()) {
                    fields.push(&name, e.value.as_bytes(), |part| match part {
                        Part::Name => entry("key"),
                        Part::Value => entry("value"),
                    })?;
                }
            }
        }
    }
    let Some(ip) = ip.value else {
        return Err(FieldError::new(
            "descriptors",
            "no descriptor has a `remote_address` entry (Envoy's `remote_address` action): the \
             caller is not known",
        ));
    };
    let cost = match units.value {
        Some(c) => Some(c),
        None if req.hits_addend == 0 => None,
        None => Some(cost(u64::from(req.hits_addend), || "hits_addend".into())?),
    };
    let mut headers = fields.into_map();
    // The caller is `remote_address`; no entry may name another.
    drop_forwarding(&mut headers);
    Ok(Call {
        request: Described {
            ip,
            method: method.value.unwrap_or(Method::GET),
            path: path.value.unwrap_or_else(|| "/".to_string()),
            headers,
        },
        cost,
    })
}

#[cfg(test)]
mod tests;
