//! nginx/Apache "combined" lines:
//! `ADDR IDENT USER [TIME] "REQUEST" STATUS BYTES "REFERER" "USER-AGENT"`, optionally followed
//! by more quoted fields named with `--fields` (an extended `log_format`, e.g. nginx's
//! `"$http_x_forwarded_for" "$http_cookie" "$http_authorization"`). The common log format
//! (no referer or user agent) reads too. Parsed in place on the line's bytes: no allocation.

use std::borrow::Cow;

use super::line::{present, split_request, LogLine, Malformed};
use super::time;

/// What a quoted field after the user agent holds (`--fields`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExtraField {
    /// `X-Forwarded-For` (`$http_x_forwarded_for`).
    Xff,
    /// `Cookie` (`$http_cookie`).
    Cookie,
    /// `Authorization` (`$http_authorization`).
    Authorization,
    /// The API key header (`$http_x_api_key`).
    ApiKey,
    /// A field the replay does not read.
    Skip,
}

/// The quoted string starting at `b[start] == b'"'`: its text and the index after its closing
/// quote. A backslash escapes the next byte (Apache writes `\"`).
fn quoted(line: &str, start: usize) -> Option<(&str, usize)> {
    let b = line.as_bytes();
    if b.get(start) != Some(&b'"') {
        return None;
    }
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some((line.get(start + 1..i)?, i + 1)),
            _ => i += 1,
        }
    }
    None
}

fn find(b: &[u8], from: usize, what: u8) -> Option<usize> {
    b.get(from..)?
        .iter()
        .position(|&c| c == what)
        .map(|p| p + from)
}

/// Parses one combined line; `extra` names the quoted fields after the user agent.
pub fn parse<'a>(line: &'a str, extra: &[ExtraField]) -> Result<LogLine<'a>, Malformed> {
    let b = line.as_bytes();
    let sp = find(b, 0, b' ').ok_or(Malformed::Syntax)?;
    let addr = &line[..sp];
    let open = find(b, sp, b'[').ok_or(Malformed::Syntax)?;
    let close = find(b, open, b']').ok_or(Malformed::Syntax)?;
    let time_ms = time::parse_clf(&line[open + 1..close]).ok_or(Malformed::Time)?;
    let req_start = find(b, close, b'"').ok_or(Malformed::Syntax)?;
    let (request, mut at) = quoted(line, req_start).ok_or(Malformed::Syntax)?;
    let (method, target) = split_request(request).ok_or(Malformed::Request)?;
    let mut out = LogLine {
        addr: Cow::Borrowed(addr),
        time_ms,
        method: Cow::Borrowed(method),
        target: Cow::Borrowed(target),
        ..LogLine::default()
    };
    // Referer and user agent, then the extra fields in order; a line may stop early.
    for i in 0..2 + extra.len() {
        let Some(next) = find(b, at, b'"') else { break };
        let (text, after) = quoted(line, next).ok_or(Malformed::Syntax)?;
        at = after;
        let Some(field) = i.checked_sub(2).and_then(|k| extra.get(k)) else {
            continue;
        };
        let value = present(Cow::Borrowed(text));
        match field {
            ExtraField::Xff => out.xff = value,
            ExtraField::Cookie => out.cookie = value,
            ExtraField::Authorization => out.authorization = value,
            ExtraField::ApiKey => out.api_key = value,
            ExtraField::Skip => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"203.0.113.7 - - [10/Oct/2000:13:55:36 -0700] "GET /api/feeds?page=2 HTTP/1.1" 200 2326 "http://example.com/" "Mozilla/4.08 [en] (Win98; I ;Nav)""#;

    #[test]
    fn a_combined_line() {
        let l = parse(LINE, &[]).unwrap();
        assert_eq!(l.addr, "203.0.113.7");
        assert_eq!(l.time_ms, 971_211_336_000);
        assert_eq!((&*l.method, &*l.target), ("GET", "/api/feeds?page=2"));
        assert_eq!((l.xff, l.cookie, l.authorization), (None, None, None));
    }

    #[test]
    fn extra_fields_in_order() {
        let line = format!(r#"{LINE} "198.51.100.1, 10.0.0.2" "-" "Bearer abc""#);
        let fields = [
            ExtraField::Xff,
            ExtraField::Cookie,
            ExtraField::Authorization,
        ];
        let l = parse(&line, &fields).unwrap();
        assert_eq!(l.xff.as_deref(), Some("198.51.100.1, 10.0.0.2"));
        assert_eq!(l.cookie, None);
        assert_eq!(l.authorization.as_deref(), Some("Bearer abc"));
        // A line that stops early leaves the rest absent.
        let l = parse(LINE, &fields).unwrap();
        assert_eq!(l.xff, None);
    }

    #[test]
    fn common_log_format_and_escaped_quotes() {
        let clf = r#"::1 - frank [10/Oct/2000:13:55:36 -0700] "GET /a.gif HTTP/1.0" 200 2326"#;
        assert_eq!(parse(clf, &[]).unwrap().addr, "::1");
        let esc = r#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.1" 200 1 "-" "say \"hi\"" "session=1""#;
        let l = parse(esc, &[ExtraField::Cookie]).unwrap();
        assert_eq!(l.cookie.as_deref(), Some("session=1"));
    }

    #[test]
    fn malformed_lines_say_why() {
        let cases = [
            ("", Malformed::Syntax),
            ("garbage", Malformed::Syntax),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700 \"GET / HTTP/1.1\"",
                Malformed::Syntax,
            ),
            (
                "1.2.3.4 - - [yesterday] \"GET / HTTP/1.1\" 200 1",
                Malformed::Time,
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1",
                Malformed::Syntax,
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"\\x16\\x03\\x01\" 400 0",
                Malformed::Request,
            ),
            (
                "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1 \"-",
                Malformed::Syntax,
            ),
        ];
        for (line, why) in cases {
            assert_eq!(parse(line, &[]), Err(why), "{line:?}");
        }
    }
}
