//! Which front end asks `/v1/auth`, and what it says about the original request: its method,
//! its path and its client. Each front end has its own convention:
//!
//! - **nginx** `auth_request`: `X-Original-URI` (required) and `X-Original-Method` (GET when
//!   absent); the client in `X-Real-IP`.
//! - **Caddy** `forward_auth` and **Traefik** `forwardAuth`: `X-Forwarded-Uri` and
//!   `X-Forwarded-Method` (with `X-Forwarded-Host` and `X-Forwarded-Proto`); the client in
//!   `X-Forwarded-For`.
//! - **Envoy** HTTP ext_authz (`path_prefix: /v1/auth/envoy`): the original path follows
//!   [`ENVOY_PREFIX`], the method is the request's own, the client in `X-Forwarded-For` (which
//!   Envoy's connection manager appended to); Envoy takes only a 200 as an allow.
//!
//! The client field is read only from a trusted peer (`[http] trusted_peers`) and only the one
//! the front end itself writes: Caddy, Traefik and Envoy pass the caller's own `X-Real-IP`
//! through untouched, so believing it there would let any caller name someone else.
//! `X-Forwarded-For` is walked from the right past trusted peers, as the proxy walks it
//! ([`crate::identity::client_ip::client`]), unattributed values included.
//!
//! A request carrying both nginx's and Caddy's URI field is refused: the front end set one and
//! passed the other through from the caller, and which is which cannot be told here.

use std::net::IpAddr;

use http::{HeaderMap, HeaderName, Method, StatusCode, Uri};
use ipnet::IpNet;

use crate::config::ForwardedHeader;
use crate::identity::client_ip::{forwarded, real_ip, Client};

pub const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
pub const X_ORIGINAL_URI: HeaderName = HeaderName::from_static("x-original-uri");
pub const X_ORIGINAL_METHOD: HeaderName = HeaderName::from_static("x-original-method");
pub const X_FORWARDED_URI: HeaderName = HeaderName::from_static("x-forwarded-uri");
pub const X_FORWARDED_METHOD: HeaderName = HeaderName::from_static("x-forwarded-method");
pub const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// The path Envoy's ext_authz `path_prefix` points at; the original path follows it.
pub const ENVOY_PREFIX: &str = "/v1/auth/envoy";

/// What a request that matches no convention is told.
pub const NO_CONVENTION: &str = "No forward-auth convention matched. nginx auth_request sends \
     X-Original-URI and X-Original-Method (`proxy_set_header X-Original-URI $request_uri;`) \
     with X-Real-IP; Caddy forward_auth and Traefik forwardAuth send X-Forwarded-Uri, \
     X-Forwarded-Method, X-Forwarded-Host, X-Forwarded-Proto and X-Forwarded-For; Envoy's HTTP \
     ext_authz asks /v1/auth/envoy/<original path> (`path_prefix: /v1/auth/envoy`) with the \
     request's own method and X-Forwarded-For.";

/// The front end a `/v1/auth` request came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Front {
    Nginx,
    /// Caddy or Traefik: both send the `X-Forwarded-*` set.
    Forwarded,
    Envoy,
}

impl Front {
    /// The allow status: Envoy takes only 200; the others take any 2xx, and 204 says "no body".
    /// Where this convention carries the original path, as a problem's `field` names it.
    pub fn path_field(self) -> &'static str {
        match self {
            Front::Envoy => "path",
            Front::Nginx => "x-original-uri",
            Front::Forwarded => "x-forwarded-uri",
        }
    }

    pub fn allow_status(self) -> StatusCode {
        match self {
            Front::Envoy => StatusCode::OK,
            Front::Nginx | Front::Forwarded => StatusCode::NO_CONTENT,
        }
    }
}

/// The original request as the front end describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Original {
    pub front: Front,
    pub method: Method,
    /// The path without its query string.
    pub path: String,
}

/// Why a request describes no original request: the 400's detail and the field at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unmatched {
    pub detail: String,
    pub field: Option<&'static str>,
}

fn method_of(headers: &HeaderMap, name: &HeaderName) -> Method {
    headers
        .get(name)
        .and_then(|v| Method::from_bytes(v.as_bytes()).ok())
        .unwrap_or(Method::GET)
}

fn path_of(uri: &str, field: &'static str, shown: &str) -> Result<String, Unmatched> {
    let path = uri.split('?').next().unwrap_or("/");
    if !path.starts_with('/') {
        return Err(Unmatched {
            detail: format!("Header {shown} {path:?} must start with `/`."),
            field: Some(field),
        });
    }
    Ok(path.to_string())
}

/// The original request of `method uri` with `headers`, by the first convention that matches.
pub fn original(method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<Original, Unmatched> {
    if let Some(rest) = uri.path().strip_prefix(ENVOY_PREFIX) {
        if rest.is_empty() || rest.starts_with('/') {
            let path = if rest.is_empty() { "/" } else { rest };
            return Ok(Original {
                front: Front::Envoy,
                method: method.clone(),
                path: path.to_string(),
            });
        }
    }
    let text = |name: &HeaderName| headers.get(name).map(|v| v.to_str().ok());
    match (text(&X_ORIGINAL_URI), text(&X_FORWARDED_URI)) {
        (Some(_), Some(_)) => Err(Unmatched {
            detail: "Both X-Original-URI (nginx) and X-Forwarded-Uri (Caddy, Traefik) are set: \
                     the front end passed one through from the caller. Remove the one your \
                     front end does not set (nginx: `proxy_set_header X-Forwarded-Uri \"\";`; \
                     Caddy: `header_up -X-Original-URI`)."
                .into(),
            field: Some("x-original-uri"),
        }),
        (Some(Some(uri)), None) => Ok(Original {
            front: Front::Nginx,
            method: method_of(headers, &X_ORIGINAL_METHOD),
            path: path_of(uri, "x-original-uri", "X-Original-URI")?,
        }),
        (None, Some(Some(uri))) => Ok(Original {
            front: Front::Forwarded,
            method: method_of(headers, &X_FORWARDED_METHOD),
            path: path_of(uri, "x-forwarded-uri", "X-Forwarded-Uri")?,
        }),
        (Some(None), None) => Err(Unmatched {
            detail: "Header X-Original-URI is not text.".into(),
            field: Some("x-original-uri"),
        }),
        (None, Some(None)) => Err(Unmatched {
            detail: "Header X-Forwarded-Uri is not text.".into(),
            field: Some("x-forwarded-uri"),
        }),
        (None, None) => Err(Unmatched {
            detail: NO_CONVENTION.into(),
            field: None,
        }),
    }
}

/// The client behind a request of `front` from `peer`: nginx's `X-Real-IP` when it sent one,
/// else `X-Forwarded-For` walked past `trusted_peers`; either only from a trusted peer.
pub fn caller(front: Front, peer: IpAddr, headers: &HeaderMap, trusted_peers: &[IpNet]) -> Client {
    if front == Front::Nginx && headers.contains_key(&X_REAL_IP) {
        return real_ip(peer, headers.get(&X_REAL_IP), trusted_peers);
    }
    forwarded(peer, headers, trusted_peers, ForwardedHeader::XForwardedFor)
}

/// Removes every convention's fields, so the engine sees only the original request's own.
pub fn strip(headers: &mut HeaderMap) {
    for name in [
        X_ORIGINAL_URI,
        X_ORIGINAL_METHOD,
        X_FORWARDED_URI,
        X_FORWARDED_METHOD,
        X_FORWARDED_HOST,
        X_FORWARDED_PROTO,
    ] {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    }

    fn of(method: Method, uri: &str, pairs: &[(&str, &str)]) -> Result<Original, Unmatched> {
        original(&method, &uri.parse().unwrap(), &h(pairs))
    }

    #[test]
    fn each_convention_names_method_and_path() {
        let nginx = of(
            Method::GET,
            "/v1/auth",
            &[("x-original-uri", "/a?q=1"), ("x-original-method", "POST")],
        )
        .unwrap();
        assert_eq!(
            (nginx.front, nginx.method, nginx.path.as_str()),
            (Front::Nginx, Method::POST, "/a")
        );
        let caddy = of(
            Method::GET,
            "/v1/auth",
            &[("x-forwarded-uri", "/b/c?x"), ("x-forwarded-method", "PUT")],
        )
        .unwrap();
        assert_eq!(
            (caddy.front, caddy.method, caddy.path.as_str()),
            (Front::Forwarded, Method::PUT, "/b/c")
        );
        let envoy = of(Method::DELETE, "/v1/auth/envoy/d/e?y=2", &[]).unwrap();
        assert_eq!(
            (envoy.front, envoy.method, envoy.path.as_str()),
            (Front::Envoy, Method::DELETE, "/d/e")
        );
        assert_eq!(of(Method::GET, "/v1/auth/envoy", &[]).unwrap().path, "/");
        // The Envoy path wins over any header the caller slipped through.
        let e = of(Method::GET, "/v1/auth/envoy/p", &[("x-original-uri", "/q")]).unwrap();
        assert_eq!((e.front, e.path.as_str()), (Front::Envoy, "/p"));
        assert_eq!(Front::Envoy.allow_status(), StatusCode::OK);
        assert_eq!(Front::Forwarded.allow_status(), StatusCode::NO_CONTENT);
    }

    #[test]
    fn no_or_conflicting_convention_is_refused() {
        let none = of(Method::GET, "/v1/auth", &[]).unwrap_err();
        for field in [
            "X-Original-URI",
            "X-Forwarded-Uri",
            "X-Forwarded-Method",
            "X-Forwarded-For",
            "X-Real-IP",
            "/v1/auth/envoy/",
        ] {
            assert!(none.detail.contains(field), "{field}");
        }
        let both = of(
            Method::GET,
            "/v1/auth",
            &[("x-original-uri", "/a"), ("x-forwarded-uri", "/b")],
        )
        .unwrap_err();
        assert_eq!(both.field, Some("x-original-uri"));
        let rel = of(Method::GET, "/v1/auth", &[("x-forwarded-uri", "b")]).unwrap_err();
        assert_eq!(rel.field, Some("x-forwarded-uri"));
    }

    #[test]
    fn the_client_field_is_the_one_the_front_end_writes() {
        let lo: Vec<IpNet> = vec!["127.0.0.1/32".parse().unwrap()];
        let proxy: IpAddr = "127.0.0.1".parse().unwrap();
        let stranger: IpAddr = "198.51.100.9".parse().unwrap();
        let both = h(&[
            ("x-real-ip", "203.0.113.1"),
            ("x-forwarded-for", "203.0.113.5, 203.0.113.2"),
        ]);
        let ip = |s: &str| Client::Addr(s.parse().unwrap());
        assert_eq!(caller(Front::Nginx, proxy, &both, &lo), ip("203.0.113.1"));
        // Caddy and Envoy pass the caller's own X-Real-IP through: the walk decides.
        assert_eq!(
            caller(Front::Forwarded, proxy, &both, &lo),
            ip("203.0.113.2")
        );
        assert_eq!(caller(Front::Envoy, proxy, &both, &lo), ip("203.0.113.2"));
        // From an untrusted peer no field is believed.
        assert_eq!(
            caller(Front::Forwarded, stranger, &both, &lo),
            Client::Addr(stranger)
        );
        assert_eq!(
            caller(Front::Nginx, stranger, &both, &lo),
            Client::Addr(stranger)
        );
        // A trusted peer's junk is an unattributed caller of that peer.
        let junk = h(&[("x-forwarded-for", "unknown")]);
        assert_eq!(
            caller(Front::Forwarded, proxy, &junk, &lo),
            Client::Unattributed(proxy)
        );
        // nginx without X-Real-IP: the forwarding field is walked.
        let xff = h(&[("x-forwarded-for", "203.0.113.7")]);
        assert_eq!(caller(Front::Nginx, proxy, &xff, &lo), ip("203.0.113.7"));
    }
}
