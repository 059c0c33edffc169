//! RFC 9457 problem documents (`application/problem+json`): every error answer the daemon
//! writes itself, so a caller (human or agent) learns what happened and what to do from the
//! response alone.

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Response, StatusCode};
use serde_json::{Map, Value};

pub const PROBLEM_JSON: &str = "application/problem+json";

/// A problem document under construction.
#[derive(Clone, Debug)]
pub struct Problem {
    pub status: StatusCode,
    body: Map<String, Value>,
}

impl Problem {
    /// `type` is `about:blank` unless `type_uri` is given; `title` is the status phrase.
    pub fn new(status: StatusCode, type_uri: Option<String>, detail: impl Into<String>) -> Self {
        let mut body = Map::new();
        body.insert(
            "type".into(),
            Value::String(type_uri.unwrap_or_else(|| "about:blank".into())),
        );
        body.insert(
            "title".into(),
            Value::String(status.canonical_reason().unwrap_or("Error").into()),
        );
        body.insert("status".into(), Value::from(status.as_u16()));
        body.insert("detail".into(), Value::String(detail.into()));
        Problem { status, body }
    }

    /// Adds an extension member.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.body.insert(key.into(), value.into());
        self
    }

    /// The member `key`, if set.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.body.get(key)
    }

    pub fn to_value(&self) -> Value {
        Value::Object(self.body.clone())
    }

    pub fn to_bytes(&self) -> Bytes {
        // Serialising a map of strings and numbers cannot fail.
        Bytes::from(serde_json::to_vec(&self.body).unwrap_or_default())
    }

    /// The response: status, `Content-Type: application/problem+json`, `Cache-Control: no-store`.
    pub fn into_response(self) -> Response<Bytes> {
        let body = self.to_bytes();
        let mut resp = Response::new(body);
        *resp.status_mut() = self.status;
        let h = resp.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        resp
    }
}

/// `502`: the upstream could not be reached or broke the exchange.
pub fn bad_gateway(detail: impl Into<String>) -> Response<Bytes> {
    Problem::new(StatusCode::BAD_GATEWAY, None, detail).into_response()
}

/// `504`: the upstream did not answer within the configured time.
pub fn gateway_timeout(detail: impl Into<String>) -> Response<Bytes> {
    Problem::new(StatusCode::GATEWAY_TIMEOUT, None, detail).into_response()
}

/// `400` naming what is wrong with the request.
pub fn bad_request(detail: impl Into<String>) -> Response<Bytes> {
    Problem::new(StatusCode::BAD_REQUEST, None, detail).into_response()
}
