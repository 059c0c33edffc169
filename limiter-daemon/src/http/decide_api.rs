//! `POST /v1/decide`: the decision for a described request, for apps and gateways that enforce
//! it themselves. Nothing is held here: a delay comes back as `delayMs` for the caller to apply.
//!
//! Request: `{"ip": "203.0.113.7", "method": "GET", "path": "/api/search?q=x",
//! "headers": {"cookie": "session=…"}}` (`method` defaults to GET, `headers` to none; a header
//! value may be a string or a list of strings).
//! Answer: `{"action", "tier", "reason", "delayMs", "retryAfter", "headers"}` plus, for a
//! reject, `problem`: the 429 body the caller should send. Malformed input → 400 naming the field.

use std::net::IpAddr;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde_json::{json, Map, Value};

use super::api::{drop_forwarding, ApiState};
use super::decider::RequestView;
use super::problem;
use super::response::{problem as rejection_problem, retry_after, write_headers};
use crate::model::Action;

/// A described request, checked.
#[derive(Debug)]
pub struct Described {
    pub ip: IpAddr,
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
}

/// What is wrong with a `/v1/decide` body.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DescribeError {
    #[error("body is not JSON: {0}")]
    NotJson(String),
    #[error("body must be a JSON object")]
    NotObject,
    #[error("field `{0}` is missing")]
    Missing(&'static str),
    #[error("field `{field}`: {message}")]
    Invalid { field: String, message: String },
}

impl DescribeError {
    /// The field at fault, when there is one.
    pub fn field(&self) -> Option<String> {
        match self {
            DescribeError::Missing(f) => Some((*f).to_string()),
            DescribeError::Invalid { field, .. } => Some(field.clone()),
            DescribeError::NotJson(_) | DescribeError::NotObject => None,
        }
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> DescribeError {
    DescribeError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

fn string<'a>(
    obj: &'a Map<String, Value>,
    field: &'static str,
) -> Result<Option<&'a str>, DescribeError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(field, "must be a string")),
    }
}

/// Parses and checks a `/v1/decide` body.
pub fn parse(body: &[u8]) -> Result<Described, DescribeError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| DescribeError::NotJson(e.to_string()))?;
    let obj = value.as_object().ok_or(DescribeError::NotObject)?;

    let ip_text = string(obj, "ip")?.ok_or(DescribeError::Missing("ip"))?;
    let ip: IpAddr = ip_text
        .parse()
        .map_err(|_| invalid("ip", format!("{ip_text:?} is not an IPv4 or IPv6 address")))?;

    let method = match string(obj, "method")? {
        None => Method::GET,
        Some(m) => Method::from_bytes(m.as_bytes())
            .map_err(|_| invalid("method", format!("{m:?} is not an HTTP method")))?,
    };

    let path_text = string(obj, "path")?.ok_or(DescribeError::Missing("path"))?;
    if !path_text.starts_with('/') {
        return Err(invalid(
            "path",
            format!("{path_text:?} must start with `/`"),
        ));
    }
    let path = path_text.split('?').next().unwrap_or("/").to_string();

    let mut headers = HeaderMap::new();
    match obj.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (name, v) in map {
                let field = || format!("headers.{name}");
                let hn = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| invalid(field(), "is not a valid header name"))?;
                let values: Vec<&str> = match v {
                    Value::String(s) => vec![s.as_str()],
                    Value::Array(items) => items
                        .iter()
                        .map(|i| {
                            i.as_str()
                                .ok_or_else(|| invalid(field(), "list items must be strings"))
                        })
                        .collect::<Result<_, _>>()?,
                    _ => return Err(invalid(field(), "must be a string or a list of strings")),
                };
                for s in values {
                    let hv = HeaderValue::from_str(s).map_err(|_| {
                        invalid(field(), "value has characters not allowed in a header")
                    })?;
                    headers.append(hn.clone(), hv);
                }
            }
        }
        Some(_) => {
            return Err(invalid(
                "headers",
                "must be an object of header names to values",
            ))
        }
    }
    drop_forwarding(&mut headers);
    Ok(Described {
        ip,
        method,
        path,
        headers,
    })
}

pub async fn decide(State(state): State<ApiState>, body: Bytes) -> Response {
    let described = match parse(&body) {
        Ok(d) => d,
        Err(err) => {
            let mut p = problem::Problem::new(http::StatusCode::BAD_REQUEST, None, err.to_string());
            if let Some(field) = err.field() {
                p = p.with("field", field);
            }
            return p
                .into_response()
                .map(axum::body::Body::from)
                .into_response();
        }
    };
    let d = state.decider.decide(&RequestView {
        peer: described.ip,
        method: &described.method,
        path: &described.path,
        headers: &described.headers,
    });
    let mut h = HeaderMap::new();
    write_headers(&d, &mut h);
    let headers: Map<String, Value> = h
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                Value::String(String::from_utf8_lossy(v.as_bytes()).into_owned()),
            )
        })
        .collect();
    let rejected = d.action() == Action::Reject;
    let mut out = json!({
        "action": d.action().as_str(),
        "tier": d.tier.as_str(),
        "reason": d.reason().map(|r| r.as_str()),
        "delayMs": u64::try_from(d.delay().as_millis()).unwrap_or(u64::MAX),
        "retryAfter": if rejected { Some(retry_after(&d)) } else { None },
        "headers": headers,
    });
    if rejected {
        out["problem"] = rejection_problem(&d, &state.hints).to_value();
    }
    axum::Json(out).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(body: &str) -> Option<String> {
        parse(body.as_bytes()).unwrap_err().field()
    }

    #[test]
    fn happy_path_parses_every_field() {
        let d = parse(br#"{"ip":"2001:db8::1","method":"POST","path":"/api/x?q=1","headers":{"cookie":"s=1","accept":["a","b"]}}"#).unwrap();
        assert_eq!(d.ip, "2001:db8::1".parse::<IpAddr>().unwrap());
        assert_eq!(d.method, Method::POST);
        assert_eq!(d.path, "/api/x");
        assert_eq!(d.headers.get_all("accept").iter().count(), 2);
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(field_of(r#"{"path":"/"}"#).as_deref(), Some("ip"));
        assert_eq!(
            field_of(r#"{"ip":"nope","path":"/"}"#).as_deref(),
            Some("ip")
        );
        assert_eq!(field_of(r#"{"ip":5,"path":"/"}"#).as_deref(), Some("ip"));
        assert_eq!(field_of(r#"{"ip":"1.2.3.4"}"#).as_deref(), Some("path"));
        assert_eq!(
            field_of(r#"{"ip":"1.2.3.4","path":"x"}"#).as_deref(),
            Some("path")
        );
        assert_eq!(
            field_of(r#"{"ip":"1.2.3.4","path":"/","method":"G E T"}"#).as_deref(),
            Some("method")
        );
        assert_eq!(
            field_of(r#"{"ip":"1.2.3.4","path":"/","headers":[]}"#).as_deref(),
            Some("headers")
        );
        assert_eq!(
            field_of(r#"{"ip":"1.2.3.4","path":"/","headers":{"bad name":"v"}}"#).as_deref(),
            Some("headers.bad name")
        );
        assert_eq!(
            field_of(r#"{"ip":"1.2.3.4","path":"/","headers":{"x":"a\nb"}}"#).as_deref(),
            Some("headers.x")
        );
        assert_eq!(parse(b"{nope").unwrap_err().field(), None);
        assert_eq!(parse(b"[1]").unwrap_err(), DescribeError::NotObject);
    }

    #[test]
    fn forwarding_headers_cannot_change_the_client() {
        let d = parse(br#"{"ip":"192.0.2.1","path":"/","headers":{"x-forwarded-for":"10.9.9.9","x-real-ip":"10.9.9.9","forwarded":"for=10.9.9.9"}}"#).unwrap();
        assert!(d.headers.is_empty());
    }
}
