//! How a client knows it is talking to the limiter's admin API and not to whatever else
//! listens at the address it was given. The admin API puts [`MARKER`] on every response (401,
//! 404 and the operator page included); its clients (limiterctl, `limiter-daemon kernel
//! lock|unlock`) first ask without the token and send the token only to a server whose answer
//! carries the marker ([`probe_answer`]), then check each answer's marker, content type and shape
//! ([`answer`]) before believing it.
//!
//! The marker is no secret and proves nothing against a server built to imitate it; what it
//! stops is the mistake: a wrong `--url` or port, where any HTTP server used to be thanked
//! with the admin token and its `200 OK` printed as "applied".

use http::{HeaderMap, StatusCode};
use serde_json::Value;

/// The response field the admin API sets on every answer.
pub const MARKER: &str = "x-limiter-admin";
/// Its value: the API's version.
pub const MARKER_VALUE: &str = "v1";

/// What a client's answer turned out to be.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotAdmin {
    #[error("the answer has no `{MARKER}: {MARKER_VALUE}` field")]
    NoMarker,
    #[error("the answer is {0:?}, not JSON")]
    NotJson(String),
    #[error("the answer's body is not a JSON object")]
    NotObject,
    #[error("the answer is a {0} without a problem+json body")]
    NotAProblem(u16),
}

fn marked(headers: &HeaderMap) -> bool {
    headers
        .get(MARKER)
        .is_some_and(|v| v.as_bytes() == MARKER_VALUE.as_bytes())
}

/// Checks the answer to the tokenless probe: any status, with the marker.
pub fn probe_answer(headers: &HeaderMap) -> Result<(), NotAdmin> {
    if marked(headers) {
        Ok(())
    } else {
        Err(NotAdmin::NoMarker)
    }
}

/// Checks an answer to a real request and returns its JSON: the marker, a JSON content type
/// (`application/json`, or `application/problem+json` for an error), a JSON object, and on
/// an error the problem's `status` member matching the status line.
pub fn answer(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Result<Value, NotAdmin> {
    if !marked(headers) {
        return Err(NotAdmin::NoMarker);
    }
    let ct = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = ct.split(';').next().unwrap_or("").trim();
    let expected = if status.is_success() {
        "application/json"
    } else {
        "application/problem+json"
    };
    if !essence.eq_ignore_ascii_case(expected) {
        return Err(NotAdmin::NotJson(ct.to_string()));
    }
    let v: Value = serde_json::from_slice(body).map_err(|_| NotAdmin::NotJson(ct.to_string()))?;
    if !v.is_object() {
        return Err(NotAdmin::NotObject);
    }
    if !status.is_success()
        && v.get("status").and_then(Value::as_u64) != Some(u64::from(status.as_u16()))
    {
        return Err(NotAdmin::NotAProblem(status.as_u16()));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn only_a_marked_json_answer_is_the_admin_api() {
        let ok = headers(&[(MARKER, MARKER_VALUE), ("content-type", "application/json")]);
        assert_eq!(
            answer(StatusCode::OK, &ok, br#"{"applied":true}"#).unwrap()["applied"],
            true
        );
        assert!(probe_answer(&ok).is_ok());
        // Any other server: no marker, whatever it says.
        let plain = headers(&[("content-type", "application/json")]);
        assert_eq!(probe_answer(&plain), Err(NotAdmin::NoMarker));
        assert_eq!(
            answer(StatusCode::OK, &plain, b"{}"),
            Err(NotAdmin::NoMarker)
        );
        let html = headers(&[(MARKER, MARKER_VALUE), ("content-type", "text/html")]);
        assert!(matches!(
            answer(StatusCode::OK, &html, b"<p>hi</p>"),
            Err(NotAdmin::NotJson(_))
        ));
        assert_eq!(
            answer(StatusCode::OK, &ok, b"[1,2]"),
            Err(NotAdmin::NotObject)
        );
        let problem = headers(&[
            (MARKER, MARKER_VALUE),
            ("content-type", "application/problem+json"),
        ]);
        assert!(answer(
            StatusCode::NOT_FOUND,
            &problem,
            br#"{"status":404,"field":"ip"}"#
        )
        .is_ok());
        assert_eq!(
            answer(StatusCode::NOT_FOUND, &problem, br#"{"status":200}"#),
            Err(NotAdmin::NotAProblem(404))
        );
    }
}
