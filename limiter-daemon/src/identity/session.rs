//! Session callers: the configured cookie is present. Presence only, no lookup: a forged
//! cookie buys the session allowance and nothing else.

use http::header::COOKIE;
use http::HeaderMap;

/// True when any `Cookie` header carries `name=…`. Unreadable headers count as absent.
pub fn has_session_cookie(headers: &HeaderMap, name: &str) -> bool {
    headers.get_all(COOKIE).iter().any(|v| {
        v.to_str().is_ok_and(|text| {
            text.split(';').any(|pair| {
                pair.trim()
                    .split_once('=')
                    .is_some_and(|(k, v)| k.trim() == name && !v.trim().is_empty())
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_among_other_cookies() {
        let mut h = HeaderMap::new();
        h.insert(COOKIE, "a=1; session=anything; b=2".parse().unwrap());
        assert!(has_session_cookie(&h, "session"));
        assert!(!has_session_cookie(&h, "sess"));
    }

    #[test]
    fn malformed_or_empty_is_absent() {
        let mut h = HeaderMap::new();
        h.insert(COOKIE, "session; x".parse().unwrap());
        assert!(!has_session_cookie(&h, "session"));
        h.insert(COOKIE, "session=".parse().unwrap());
        assert!(!has_session_cookie(&h, "session"));
        h.insert(
            COOKIE,
            http::HeaderValue::from_bytes(b"session=\xff").unwrap(),
        );
        assert!(!has_session_cookie(&h, "session"));
    }
}
