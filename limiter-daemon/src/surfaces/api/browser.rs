//! What keeps a web page out of the loopback APIs. A page open in a browser on the host can
//! send requests to `127.0.0.1` without asking anyone: a "simple" cross-origin POST
//! (`text/plain`, a form) goes out with no preflight, and the page need not read the answer
//! for the harm to be done (a `/v1/decide` strikes the address it names). Two rules, shared by
//! the decision API and the admin API:
//!
//! - **JSON only** ([`is_json`]): a browser sends `application/json` cross-origin only after a
//!   CORS preflight, which neither API answers, so a body in any other type is refused (415).
//! - **No other origin** ([`cross_site`]): a browser says where a request comes from. A
//!   `Sec-Fetch-Site` other than `same-origin` or `none` (typed in the address bar) is refused,
//!   and so is an `Origin` that is not the origin the request was sent to (browsers without
//!   fetch metadata). `same-site` is refused too: a page on `127.0.0.1:8080` is "same-site" with
//!   `127.0.0.1:9465`, site ignoring the port. Programs (curl, nginx, an app's HTTP client) send
//!   neither field and are not affected; the operator page at `/admin/` calls its own origin.

use http::header::{HOST, ORIGIN};
use http::{HeaderMap, HeaderName, Uri};

/// `Sec-Fetch-Site` (fetch metadata), set by the browser and not by the page.
pub const SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");

/// `true` when a `Content-Type` value is JSON: `application/json` or a `+json` type, with or
/// without parameters.
pub fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// The `Content-Type` of `headers` (empty when absent or unreadable), and whether it is JSON.
pub fn json_content_type(headers: &HeaderMap) -> (bool, &str) {
    let ct = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    (is_json(ct), ct)
}

/// A request a browser sent from another origin: the field that shows it, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrossSite {
    /// `Sec-Fetch-Site` or `Origin`.
    pub field: &'static str,
    pub detail: String,
}

/// `host[:port]` lower-cased, without the scheme's default port.
fn authority(scheme: &str, authority: &str) -> String {
    let a = authority.trim().to_ascii_lowercase();
    let default = match scheme {
        "https" => ":443",
        _ => ":80",
    };
    match a.strip_suffix(default) {
        Some(bare) => bare.to_string(),
        None => a,
    }
}

/// Why a request that `headers` and `uri` describe came from a browser on another origin, or
/// `None` when it did not (or did not come from a browser).
pub fn cross_site(headers: &HeaderMap, uri: &Uri) -> Option<CrossSite> {
    if let Some(site) = headers.get(SEC_FETCH_SITE) {
        let site = site.to_str().unwrap_or("").trim().to_ascii_lowercase();
        if site == "same-origin" || site == "none" {
            return None;
        }
        return Some(CrossSite {
            field: "Sec-Fetch-Site",
            detail: format!(
                "a browser sent this request from another origin (Sec-Fetch-Site: {site}); \
                 this API answers programs and its own page only"
            ),
        });
    }
    let origin = headers.get(ORIGIN)?;
    let refused = |why: String| {
        Some(CrossSite {
            field: "Origin",
            detail: format!("{why}; this API answers programs and its own page only"),
        })
    };
    let Some(text) = origin.to_str().ok().map(str::trim) else {
        return refused("the Origin field is not readable".to_string());
    };
    let Some((scheme, rest)) = text.split_once("://") else {
        return refused(format!("a browser sent this request from origin {text:?}"));
    };
    let target = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()));
    let scheme = scheme.to_ascii_lowercase();
    match target {
        Some(host) if authority(&scheme, rest) == authority(&scheme, host) => None,
        _ => refused(format!(
            "a browser sent this request from origin {text:?}, not from this server's"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn check(pairs: &[(&str, &str)]) -> Option<&'static str> {
        cross_site(&headers(pairs), &Uri::from_static("/v1/decide")).map(|c| c.field)
    }

    #[test]
    fn json_is_application_json_or_a_json_suffix() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(is_json("application/problem+json"));
        for no in [
            "",
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "text/json-ish",
        ] {
            assert!(!is_json(no), "{no}");
        }
    }

    #[test]
    fn programs_and_the_same_origin_pass() {
        assert_eq!(check(&[]), None);
        assert_eq!(check(&[("host", "127.0.0.1:9465")]), None);
        assert_eq!(check(&[("sec-fetch-site", "same-origin")]), None);
        assert_eq!(check(&[("sec-fetch-site", "none")]), None);
        assert_eq!(
            check(&[
                ("host", "127.0.0.1:9465"),
                ("origin", "http://127.0.0.1:9465")
            ]),
            None
        );
        assert_eq!(
            check(&[("host", "LOCALHOST"), ("origin", "http://localhost:80")]),
            None
        );
        // Fetch metadata wins: a proxy in front may have rewritten Host.
        assert_eq!(
            check(&[
                ("host", "backend:9465"),
                ("origin", "https://ops.example"),
                ("sec-fetch-site", "same-origin"),
            ]),
            None
        );
    }

    #[test]
    fn another_origin_is_refused_naming_the_field() {
        for site in ["cross-site", "same-site", "bogus"] {
            assert_eq!(
                check(&[("sec-fetch-site", site)]),
                Some("Sec-Fetch-Site"),
                "{site}"
            );
        }
        assert_eq!(
            check(&[
                ("host", "127.0.0.1:8081"),
                ("origin", "http://127.0.0.1:8080")
            ]),
            Some("Origin")
        );
        assert_eq!(
            check(&[("host", "127.0.0.1:8081"), ("origin", "null")]),
            Some("Origin")
        );
        assert_eq!(check(&[("origin", "http://evil.example")]), Some("Origin"));
        assert_eq!(
            check(&[
                ("host", "127.0.0.1:9465"),
                ("origin", "http://evil.example:9465")
            ]),
            Some("Origin")
        );
    }
}
