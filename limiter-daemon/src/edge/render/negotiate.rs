//! Which body a refusal the daemon writes itself (a 429, a 503 for a held request) is written
//! in: `application/problem+json`, what API clients get and the default, or a small HTML page
//! ([`super::page`]) when the request's `Accept` prefers HTML, as a browser's navigation does.
//!
//! The rule, with q-values honoured (RFC 9110 §12.5.1): HTML when `text/html` or
//! `application/xhtml+xml` is named with a q above 0 and above every JSON type's
//! (`application/json`, `application/problem+json`, any `+json` type, `application/*`). A
//! wildcard `*/*` names neither, so `Accept: */*` (curl, `fetch`, most HTTP libraries) and no
//! `Accept` at all keep problem+json, and a tie goes to problem+json: a client that lists both
//! at the same weight is taken for an API client. A browser sends
//! `text/html,application/xhtml+xml,…,*/*;q=0.8` when it navigates.

use http::header::ACCEPT;
use http::HeaderMap;

/// The body of a refusal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// `application/problem+json` (RFC 9457).
    #[default]
    Problem,
    /// A small HTML page with the same facts ([`super::page`]).
    Html,
}

impl Format {
    /// The format `headers`' `Accept` fields (all of them, in order) prefer.
    pub fn of(headers: &HeaderMap) -> Format {
        let (mut html, mut json) = (0.0_f32, 0.0_f32);
        for value in headers.get_all(ACCEPT) {
            let Ok(text) = value.to_str() else { continue };
            for range in text.split(',') {
                let Some((kind, q)) = media_range(range) else {
                    continue;
                };
                match kind {
                    Kind::Html => html = html.max(q),
                    Kind::Json => json = json.max(q),
                    Kind::Other => {}
                }
            }
        }
        if html > 0.0 && html > json {
            Format::Html
        } else {
            Format::Problem
        }
    }
}

/// What a media range asks for, as far as a refusal's body goes.
enum Kind {
    Html,
    Json,
    Other,
}

/// One `Accept` element: what it names and its q (1 when absent); `None` when it does not
/// parse, or its q is not a number within 0 and 1 (such an element is ignored).
fn media_range(text: &str) -> Option<(Kind, f32)> {
    let m: mime::Mime = text.trim().parse().ok()?;
    let q = match m.get_param("q") {
        None => 1.0,
        Some(v) => v
            .as_str()
            .parse::<f32>()
            .ok()
            .filter(|q| (0.0..=1.0).contains(q))?,
    };
    // `mime` splits a structured syntax suffix off: `xhtml+xml` is subtype `xhtml`, suffix
    // `xml`.
    let (ty, sub, suffix) = (
        m.type_().as_str(),
        m.subtype().as_str(),
        m.suffix().map(|s| s.as_str()),
    );
    let kind = match (ty, sub, suffix) {
        ("text", "html", None) | ("application", "xhtml", Some("xml")) => Kind::Html,
        ("application", "json" | "*", None) | (_, _, Some("json")) => Kind::Json,
        _ => Kind::Other,
    };
    Some((kind, q))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn of(accept: &[&str]) -> Format {
        let mut h = HeaderMap::new();
        for a in accept {
            h.append(ACCEPT, HeaderValue::from_str(a).unwrap());
        }
        Format::of(&h)
    }

    #[test]
    fn browsers_navigating_get_the_page() {
        // Chromium's and Firefox's navigation Accept.
        for a in [
            "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,\
             image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7",
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
            "TEXT/HTML",
            "application/xhtml+xml",
            "text/html;q=0.9, application/problem+json;q=0.5",
        ] {
            assert_eq!(of(&[a]), Format::Html, "{a}");
        }
        assert_eq!(
            of(&["image/webp", "text/html"]),
            Format::Html,
            "several fields"
        );
    }

    #[test]
    fn api_clients_keep_problem_json() {
        for a in [
            "",
            "*/*",
            "application/json",
            "application/problem+json",
            "application/json, text/html",
            "text/html;q=0.5, application/json",
            "text/html;q=0, */*",
            "text/html;q=0.5, application/*",
            "text/html;q=0.4, application/vnd.api+json;q=0.9",
            "text/*",
            "text/html;q=nonsense",
            "text/html;q=2",
            "not a media range",
        ] {
            assert_eq!(of(&[a]), Format::Problem, "{a:?}");
        }
        assert_eq!(of(&[]), Format::Problem, "no Accept");
        let mut h = HeaderMap::new();
        h.insert(ACCEPT, HeaderValue::from_bytes(b"text/html\xff").unwrap());
        assert_eq!(Format::of(&h), Format::Problem, "unreadable bytes");
    }
}
