//! What a request must be before the proxy decides on it, the same on its own loop and under
//! hyper: RFC 9112 §3.2's `Host` rule (an HTTP/1.1 request has exactly one, and it is a valid
//! authority), a request target no longer than [`MAX_TARGET_BYTES`] (`414`, not `431`: the
//! client learns to shorten its URI, not its fields), no dot segment in the path in any
//! upstream's reading (`400`: see [`request_path`]), and no `CONNECT` (this proxy opens no
//! tunnels; `405` names the methods it forwards). A request that breaks one is answered
//! without a decision, like a malformed head: it is the client's mistake, never a 5xx.

use bytes::Bytes;
use http::header::ALLOW;
use http::{HeaderValue, Method, Response, StatusCode};

use crate::edge::render::problem::{bad_request, Problem};
use crate::model::request_path;

/// Longest request target accepted: nginx's and Apache's default request-line limit.
pub const MAX_TARGET_BYTES: usize = 8 * 1024;

/// The methods the proxy forwards (every one but `CONNECT`), for `405`'s `Allow`.
const FORWARDED_METHODS: &str = "GET, HEAD, OPTIONS, POST, PUT, PATCH, DELETE, TRACE";

/// `414` for a target of `len` bytes.
pub fn target_too_long(len: usize) -> Response<Bytes> {
    Problem::new(
        StatusCode::URI_TOO_LONG,
        None,
        format!(
            "The request target is {len} bytes; at most {MAX_TARGET_BYTES} are accepted. \
             Shorten the URI (send long parameters in a POST body)."
        ),
    )
    .into_response()
}

/// The `400` for a target the upstream could read as another route than the decision would
/// ([`request_path::refusal`]): it is neither metered nor forwarded.
pub fn path_problem(target: &str) -> Option<Response<Bytes>> {
    request_path::refusal(target).map(|r| bad_request(r.detail()))
}

/// The answer for `method` when the proxy does not forward it.
pub fn refused_method(method: &Method) -> Option<Response<Bytes>> {
    if method != Method::CONNECT {
        return None;
    }
    let mut resp = Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        None,
        "CONNECT is not supported: this is a reverse proxy, not a tunnel.",
    )
    .into_response();
    resp.headers_mut()
        .insert(ALLOW, HeaderValue::from_static(FORWARDED_METHODS));
    Some(resp)
}

/// The `400` for a request whose `Host` fields (their values, in order) break RFC 9112 §3.2;
/// `http11` says the request is HTTP/1.1 (HTTP/1.0 may leave `Host` out).
pub fn host_problem<'a>(
    http11: bool,
    mut hosts: impl Iterator<Item = &'a [u8]>,
) -> Option<Response<Bytes>> {
    let Some(first) = hosts.next() else {
        return http11
            .then(|| bad_request("An HTTP/1.1 request needs a Host field (RFC 9112 §3.2)."));
    };
    if hosts.next().is_some() {
        return Some(bad_request(
            "More than one Host field; send exactly one (RFC 9112 §3.2).",
        ));
    }
    // An empty Host is allowed (a URI without an authority); anything else must be one.
    if !first.is_empty() && http::uri::Authority::try_from(first).is_err() {
        return Some(bad_request(
            "The Host field is not a valid host[:port] (RFC 9112 §3.2).",
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(http11: bool, values: &[&str]) -> Option<u16> {
        host_problem(http11, values.iter().map(|v| v.as_bytes())).map(|r| r.status().as_u16())
    }

    #[test]
    fn exactly_one_valid_host_on_http11() {
        assert_eq!(host(true, &["example.org"]), None);
        assert_eq!(host(true, &["example.org:8080"]), None);
        assert_eq!(host(true, &["[2001:db8::1]:80"]), None);
        assert_eq!(host(true, &[""]), None);
        assert_eq!(host(true, &[]), Some(400));
        assert_eq!(host(true, &["a", "b"]), Some(400));
        assert_eq!(host(true, &["a b"]), Some(400));
        assert_eq!(host(true, &["a/b"]), Some(400));
        // HTTP/1.0 may leave it out, but not send two.
        assert_eq!(host(false, &[]), None);
        assert_eq!(host(false, &["a", "a"]), Some(400));
    }

    #[test]
    fn connect_is_refused_with_the_methods_that_are_forwarded() {
        let resp = refused_method(&Method::CONNECT).unwrap();
        assert_eq!(resp.status(), 405);
        assert!(resp.headers()[ALLOW].to_str().unwrap().contains("GET"));
        for m in [Method::GET, Method::POST, Method::DELETE] {
            assert!(refused_method(&m).is_none(), "{m}");
        }
        assert_eq!(target_too_long(9000).status(), 414);
    }

    #[test]
    fn dot_segments_are_refused_before_any_decision() {
        assert_eq!(path_problem("/a/%2e%2e/b").unwrap().status(), 400);
        assert!(path_problem("/a/b?c=/../d").is_none());
    }
}
