//! The operator page, `GET /admin/`: one HTML file with its CSS and JS inline, built into the
//! binary, so nothing is fetched from anywhere else. It holds no data and is served without
//! the token; it asks the operator for the token once (kept in the tab's sessionStorage) and
//! polls the JSON API with it (`/admin/v1/stats`, `/lockouts`, `/kernel`), which checks it on
//! every call.
//!
//! The Content-Security-Policy admits only the page's own inline script and style (by hash)
//! and calls to this listener: an injected value could run nothing, and no asset can load.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine as _;

pub const HTML: &str = include_str!("page.html");

/// The `sha256-…` CSP source of the text between `open` and `</close>` in [`HTML`].
fn hash_of(open: &str, close: &str) -> String {
    let body = HTML
        .split_once(open)
        .and_then(|(_, rest)| rest.split_once(close))
        .map_or("", |(inner, _)| inner);
    let digest = super::state::digest(body.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// The page's Content-Security-Policy.
pub fn csp() -> &'static str {
    static CSP: OnceLock<String> = OnceLock::new();
    CSP.get_or_init(|| {
        format!(
            "default-src 'none'; script-src {}; style-src {}; connect-src 'self'; \
             base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            hash_of("<script>", "</script>"),
            hash_of("<style>", "</style>"),
        )
    })
}

pub async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, csp()),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        HTML,
    )
        .into_response()
}

/// `/admin` without the slash: the page's relative calls need the canonical address.
pub async fn to_page() -> Redirect {
    Redirect::permanent("/admin/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        for external in ["src=", "href=", "@import", "url(", "http://", "https://"] {
            assert!(!HTML.contains(external), "the page names {external}");
        }
        assert_eq!(HTML.matches("<script>").count(), 1);
        assert_eq!(HTML.matches("<style>").count(), 1);
        assert!(csp().contains("script-src 'sha256-"), "{}", csp());
    }
}
