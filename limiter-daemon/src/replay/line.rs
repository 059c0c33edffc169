//! One access-log line as the replay needs it: borrowed from the line's text (nothing copied
//! per line), whichever format it came in. Fields a log leaves empty (nginx writes `-`) are
//! `None`.

use std::borrow::Cow;

/// The fields of one request. Text is borrowed from the line; a JSON string with escapes is
/// the one case that owns its text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogLine<'a> {
    /// The address the log recorded (nginx `$remote_addr`), as text.
    pub addr: Cow<'a, str>,
    /// When the request arrived, milliseconds since the Unix epoch.
    pub time_ms: u64,
    pub method: Cow<'a, str>,
    /// The request target as logged (path and query).
    pub target: Cow<'a, str>,
    /// The `X-Forwarded-For` value the log recorded.
    pub xff: Option<Cow<'a, str>>,
    /// The `Cookie` header value.
    pub cookie: Option<Cow<'a, str>>,
    /// The `Authorization` header value (a bearer JWT or API key).
    pub authorization: Option<Cow<'a, str>>,
    /// The API key header's value (`[keys] header`, `X-API-Key` by default).
    pub api_key: Option<Cow<'a, str>>,
    /// The `Signature-Agent` header value (JSON logs only): a claimed signed agent.
    pub signature_agent: Option<Cow<'a, str>>,
}

/// Why a line was not replayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// Not in the format (a field missing, a quote not closed, not JSON).
    Syntax,
    /// The timestamp is missing or not one the replay reads.
    Time,
    /// The request field is not `METHOD TARGET [PROTOCOL]` (nginx logs a TLS handshake sent to
    /// a plain port this way, as `"\x16\x03…"` with status 400).
    Request,
    /// The address is not an IP address.
    Address,
    /// Not UTF-8.
    Encoding,
    /// Longer than the reader's cap (`input::MAX_LINE`).
    TooLong,
    /// Stamped more than `order::BOUND_MS` after the clock, and the next line did not confirm
    /// the jump.
    Ahead,
    /// Stamped more than `order::BOUND_MS` before the clock.
    Behind,
    /// Stamped more than `order::FUTURE_SLACK_MS` after the replay's own time.
    Future,
}

impl Malformed {
    pub fn as_str(self) -> &'static str {
        match self {
            Malformed::Syntax => "not in the log format",
            Malformed::Time => "unreadable timestamp",
            Malformed::Request => "no METHOD TARGET request",
            Malformed::Address => "client address is not an IP",
            Malformed::Encoding => "not UTF-8",
            Malformed::TooLong => "longer than 1 MiB",
            Malformed::Ahead => {
                "stamped more than 10 minutes after the lines around it (the clock was not moved)"
            }
            Malformed::Behind => "stamped more than 10 minutes before the line before it",
            Malformed::Future => "stamped more than a day after the time the replay runs",
        }
    }
}

/// A logged value, `None` when the log says it was empty (`-` or nothing).
pub fn present(v: Cow<'_, str>) -> Option<Cow<'_, str>> {
    let t = v.trim();
    if t.is_empty() || t == "-" {
        None
    } else if t.len() == v.len() {
        Some(v)
    } else {
        Some(Cow::Owned(t.to_string()))
    }
}

/// Splits a request line `GET /path HTTP/1.1` (the protocol may be absent, as in HTTP/0.9)
/// into method and target.
pub fn split_request(request: &str) -> Option<(&str, &str)> {
    let mut parts = request.split(' ').filter(|p| !p.is_empty());
    let method = parts.next()?;
    let target = parts.next()?;
    let rest_ok = match parts.next() {
        None => true,
        Some(proto) => proto.starts_with("HTTP/") && parts.next().is_none(),
    };
    let method_ok = method
        .bytes()
        .all(|b| b.is_ascii_alphabetic() || b == b'-' || b == b'_');
    (rest_ok && method_ok).then_some((method, target))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines() {
        assert_eq!(
            split_request("GET /a?b=1 HTTP/1.1"),
            Some(("GET", "/a?b=1"))
        );
        assert_eq!(split_request("GET /a"), Some(("GET", "/a")));
        assert_eq!(split_request("-"), None);
        assert_eq!(split_request(""), None);
        assert_eq!(split_request("\\x16\\x03\\x01\\x02\\x00\\x01"), None);
        assert_eq!(split_request("GET /a HTTP/1.1 extra"), None);
    }

    #[test]
    fn dashes_are_absent() {
        assert_eq!(present(Cow::Borrowed("-")), None);
        assert_eq!(present(Cow::Borrowed("  ")), None);
        assert_eq!(present(Cow::Borrowed("a=1")), Some(Cow::Borrowed("a=1")));
    }
}
