//! A refusal as a small HTML page, for a browser ([`super::negotiate`] decides when): the same
//! facts as the problem document it is rendered from, the one source of both: what happened,
//! when to come back (`Retry-After` in words), the reason, the tier and its hourly limit, and
//! the upgrade sentence with its path or URL as a link.
//!
//! Every value is HTML-escaped, attributes included. The page loads nothing (no script, no
//! image, no font, no external style) and brings its own Content-Security-Policy: `default-src
//! 'none'` and its one inline style admitted by hash, so it renders the same under a front
//! end's strict policy as under none.

use std::sync::OnceLock;

use base64::Engine as _;
use bytes::Bytes;
use http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};
use http::{HeaderValue, Response};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::problem::Problem;

/// The page's only style, admitted by its hash in [`csp`].
const STYLE: &str = "body{font:16px/1.5 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}\
main{max-width:36rem;margin:4rem auto;padding:0 1rem}h1{font-size:1.5rem;margin:0 0 1rem}\
.when{font-size:1.2rem}dl{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1rem}\
dt{color:#666}dd{margin:0}code{font-size:.95em}\
@media (prefers-color-scheme:dark){body{color:#ddd;background:#181818}dt{color:#aaa}a{color:#8ab4f8}}";

/// The page's Content-Security-Policy: nothing but its own inline style.
pub fn csp() -> &'static str {
    static CSP: OnceLock<String> = OnceLock::new();
    CSP.get_or_init(|| {
        let digest = Sha256::digest(STYLE.as_bytes());
        format!(
            "default-src 'none'; style-src 'sha256-{}'; base-uri 'none'; form-action 'none'; \
             frame-ancestors 'none'",
            base64::engine::general_purpose::STANDARD.encode(digest)
        )
    })
}

/// `text` with `& < > " '` escaped: safe between tags and inside a quoted attribute.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `secs` in words, rounded up to what is said: `45 seconds`, `3 minutes`, `2 hours 5
/// minutes`, `1 day 3 hours`.
pub fn in_words(secs: u64) -> String {
    fn unit(n: u64, one: &str) -> String {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {one}s")
        }
    }
    let secs = secs.max(1);
    if secs < 60 {
        return unit(secs, "second");
    }
    let mins = secs.div_ceil(60);
    if mins < 60 {
        return unit(mins, "minute");
    }
    if mins < 24 * 60 {
        let (h, m) = (mins / 60, mins % 60);
        return match m {
            0 => unit(h, "hour"),
            m => format!("{} {}", unit(h, "hour"), unit(m, "minute")),
        };
    }
    let hours = secs.div_ceil(3600);
    match (hours / 24, hours % 24) {
        (d, 0) => unit(d, "day"),
        (d, h) => format!("{} {}", unit(d, "day"), unit(h, "hour")),
    }
}

/// The upgrade sentence, escaped, with the first path (`/login`) or `http(s)://` URL in it made
/// a link: the configured `[upgrade]` path or URL the sentence names.
fn upgrade_html(sentence: &str) -> String {
    const TRAILING: [char; 5] = ['.', ',', ';', ':', ')'];
    let mut out = String::new();
    let mut linked = false;
    for (i, word) in sentence.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let core = word.trim_end_matches(TRAILING);
        let is_target = core.len() > 1
            && (core.starts_with('/')
                || core.starts_with("https://")
                || core.starts_with("http://"));
        if linked || !is_target {
            out.push_str(&escape(word));
            continue;
        }
        linked = true;
        let core = escape(core);
        let tail = escape(&word[word.trim_end_matches(TRAILING).len()..]);
        out.push_str(&format!("<a href=\"{core}\">{core}</a>{tail}"));
    }
    out
}

fn text(p: &Problem, key: &str) -> Option<String> {
    match p.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The answer to a refused request in `format`: problem `p` as problem+json, or the page
/// rendered from it; either way with `Vary: Accept`, since the request's `Accept` chose.
pub fn respond(p: Problem, format: super::negotiate::Format) -> Response<Bytes> {
    let mut resp = match format {
        super::negotiate::Format::Problem => p.into_response(),
        super::negotiate::Format::Html => render(&p),
    };
    resp.headers_mut()
        .insert(http::header::VARY, HeaderValue::from_static("accept"));
    resp
}

/// The page for problem `p`, with `p`'s status and `Cache-Control: no-store`.
pub fn render(p: &Problem) -> Response<Bytes> {
    let status = p.status;
    let title = status.canonical_reason().unwrap_or("Error");
    let heading = if status == http::StatusCode::TOO_MANY_REQUESTS {
        "Too many requests"
    } else {
        "Please try again later"
    };
    let wait = p.get("retryAfter").and_then(Value::as_u64).unwrap_or(1);
    let mut facts = String::new();
    let mut fact = |name: &str, value: Option<String>| {
        if let Some(v) = value {
            facts.push_str(&format!("<dt>{name}</dt><dd>{}</dd>\n", escape(&v)));
        }
    };
    fact("Reason", text(p, "reason"));
    fact("Tier", text(p, "tier"));
    fact(
        "Hourly limit",
        text(p, "hourlyLimit").map(|n| format!("{n} units")),
    );
    fact("Network", text(p, "network"));
    fact("Retry after", Some(format!("{wait} s")));
    let upgrade = text(p, "upgrade")
        .map(|u| format!("<p class=\"upgrade\">{}</p>\n", upgrade_html(&u)))
        .unwrap_or_default();
    let body = format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"robots\" content=\"noindex\">\n\
         <title>{code} {title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n\
         <h1>{heading}</h1>\n\
         <p class=\"when\">Please come back in <strong>{when}</strong>.</p>\n\
         <p>{detail}</p>\n<dl>\n{facts}</dl>\n{upgrade}</main>\n</body>\n</html>\n",
        code = status.as_u16(),
        title = escape(title),
        when = escape(&in_words(wait)),
        detail = escape(&text(p, "detail").unwrap_or_default()),
    );
    let mut resp = Response::new(Bytes::from(body));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    if let Ok(v) = HeaderValue::from_str(csp()) {
        h.insert(CONTENT_SECURITY_POLICY, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    #[test]
    fn waits_are_said_in_words() {
        let cases = [
            (0, "1 second"),
            (1, "1 second"),
            (45, "45 seconds"),
            (60, "1 minute"),
            (61, "2 minutes"),
            (3599, "1 hour"),
            (3600, "1 hour"),
            (3660, "1 hour 1 minute"),
            (7500, "2 hours 5 minutes"),
            (86_400, "1 day"),
            (90_000, "1 day 1 hour"),
            (200_000, "2 days 8 hours"),
        ];
        for (secs, words) in cases {
            assert_eq!(in_words(secs), words, "{secs} s");
        }
    }

    #[test]
    fn every_value_is_escaped_and_the_upgrade_path_is_a_link() {
        let p = Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            None,
            "<script>alert(1)</script> & \"quotes\"",
        )
        .with("tier", "anon")
        .with("reason", "hourly")
        .with("hourlyLimit", 600)
        .with("retryAfter", 720)
        .with(
            "upgrade",
            "Sign in at /login?next=\"><img src=x> for the session allowance.",
        );
        let resp = render(&p);
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[CONTENT_TYPE], "text/html; charset=utf-8");
        let html = std::str::from_utf8(resp.body()).unwrap();
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quotes&quot;"));
        assert!(
            html.contains("<a href=\"/login?next=&quot;&gt;&lt;img\">"),
            "the link's attribute is escaped: {html}"
        );
        assert!(
            html.contains("come back in <strong>12 minutes</strong>"),
            "{html}"
        );
        for fact in ["hourly", "anon", "600 units", "720 s"] {
            assert!(html.contains(&format!("<dd>{fact}</dd>")), "{fact}: {html}");
        }
    }

    #[test]
    fn the_page_loads_nothing_and_its_policy_admits_only_its_style() {
        let p = Problem::new(StatusCode::SERVICE_UNAVAILABLE, None, "held").with("retryAfter", 5);
        let resp = render(&p);
        let html = std::str::from_utf8(resp.body()).unwrap();
        for external in [
            "src=", "href=", "@import", "url(", "http://", "https://", "<script",
        ] {
            assert!(
                !html.contains(external),
                "the page names {external}: {html}"
            );
        }
        assert!(html.contains(&format!("<style>{STYLE}</style>")));
        let policy = resp.headers()[CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(
            policy.starts_with("default-src 'none'; style-src 'sha256-"),
            "{policy}"
        );
        assert!(!policy.contains("unsafe"), "{policy}");
    }

    #[test]
    fn a_url_in_the_upgrade_sentence_is_linked_once_and_punctuation_stays_outside() {
        let html = upgrade_html("Get an API key at https://example.com/account. Or /other.");
        assert_eq!(
            html,
            "Get an API key at <a href=\"https://example.com/account\">https://example.com/account</a>. Or /other."
        );
        assert_eq!(upgrade_html("Nothing to link."), "Nothing to link.");
    }
}
