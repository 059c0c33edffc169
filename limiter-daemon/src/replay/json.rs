//! JSON lines: one object per line, as nginx `log_format … escape=json` or a log shipper writes
//! them. Fields are read by name and every other field is ignored:
//!
//! | what | names read (first present wins) |
//! |---|---|
//! | address | `remote_addr`, `client_ip`, `ip`, `client` (the daemon's own access log) |
//! | time | `msec`, `time_iso8601`, `time`, `timestamp`, `@timestamp`, `time_local` (a string in any of the three timestamp forms, or epoch seconds as a number) |
//! | request | `request` (`GET /a HTTP/1.1`), else `method`/`request_method` with `uri`/`request_uri`/`path` |
//! | X-Forwarded-For | `http_x_forwarded_for`, `xff`, `x_forwarded_for` |
//! | Cookie | `http_cookie`, `cookie` |
//! | Authorization | `http_authorization`, `authorization` |
//! | API key header | `http_x_api_key`, `api_key` |
//! | Signature-Agent | `http_signature_agent`, `signature_agent` |
//!
//! Strings are borrowed from the line unless they hold escapes. Ordinary lines are scanned in
//! place ([`json_fast`]); serde_json reads the rest.

use std::borrow::Cow;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use super::json_fast::{self, Val};
use super::line::{present, split_request, LogLine, Malformed};
use super::time;

/// A timestamp field: text in one of the forms [`time::parse_any`] reads, or epoch seconds.
#[derive(Debug)]
enum Stamp<'a> {
    Text(Cow<'a, str>),
    Secs(f64),
}

impl<'de: 'a, 'a> Deserialize<'de> for Stamp<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Stamp<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a timestamp string or epoch seconds")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Stamp<'a>, E> {
                Ok(Stamp::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Stamp<'a>, E> {
                Ok(Stamp::Text(Cow::Owned(v.to_string())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Stamp<'a>, E> {
                Ok(Stamp::Secs(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Stamp<'a>, E> {
                Ok(Stamp::Secs(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Stamp<'a>, E> {
                Ok(Stamp::Secs(v))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl Stamp<'_> {
    fn ms(&self) -> Option<u64> {
        match self {
            Stamp::Text(t) => time::parse_any(t),
            Stamp::Secs(s) if s.is_finite() && *s >= 0.0 && *s < 1e12 => {
                Some((s * 1000.0).round() as u64)
            }
            Stamp::Secs(_) => None,
        }
    }
}

type Text<'a> = Option<Cow<'a, str>>;

#[derive(Default, Deserialize)]
struct Raw<'a> {
    #[serde(borrow, default)]
    remote_addr: Text<'a>,
    #[serde(borrow, default)]
    client_ip: Text<'a>,
    #[serde(borrow, default)]
    ip: Text<'a>,
    #[serde(borrow, default)]
    client: Text<'a>,
    #[serde(borrow, default)]
    msec: Option<Stamp<'a>>,
    #[serde(borrow, default)]
    time_iso8601: Option<Stamp<'a>>,
    #[serde(borrow, default)]
    time: Option<Stamp<'a>>,
    #[serde(borrow, default)]
    timestamp: Option<Stamp<'a>>,
    #[serde(borrow, default, rename = "@timestamp")]
    at_timestamp: Option<Stamp<'a>>,
    #[serde(borrow, default)]
    time_local: Option<Stamp<'a>>,
    #[serde(borrow, default)]
    request: Text<'a>,
    #[serde(borrow, default)]
    method: Text<'a>,
    #[serde(borrow, default)]
    request_method: Text<'a>,
    #[serde(borrow, default)]
    uri: Text<'a>,
    #[serde(borrow, default)]
    request_uri: Text<'a>,
    #[serde(borrow, default)]
    path: Text<'a>,
    #[serde(borrow, default)]
    http_x_forwarded_for: Text<'a>,
    #[serde(borrow, default)]
    xff: Text<'a>,
    #[serde(borrow, default)]
    x_forwarded_for: Text<'a>,
    #[serde(borrow, default)]
    http_cookie: Text<'a>,
    #[serde(borrow, default)]
    cookie: Text<'a>,
    #[serde(borrow, default)]
    http_authorization: Text<'a>,
    #[serde(borrow, default)]
    authorization: Text<'a>,
    #[serde(borrow, default)]
    http_x_api_key: Text<'a>,
    #[serde(borrow, default)]
    api_key: Text<'a>,
    #[serde(borrow, default)]
    http_signature_agent: Text<'a>,
    #[serde(borrow, default)]
    signature_agent: Text<'a>,
}

/// Fills `slot` once; a second value (a duplicate member) or a value of the wrong kind sends the
/// line to serde_json, which refuses it.
fn text<'a>(slot: &mut Text<'a>, v: Val<'a>) -> bool {
    match (slot.is_some(), v) {
        (false, Val::Str(s)) => *slot = Some(Cow::Borrowed(s)),
        (false, Val::Null) => {}
        _ => return false,
    }
    true
}

fn stamp<'a>(slot: &mut Option<Stamp<'a>>, v: Val<'a>) -> bool {
    match (slot.is_some(), v) {
        (false, Val::Str(s)) => *slot = Some(Stamp::Text(Cow::Borrowed(s))),
        (false, Val::Num(n)) => match n.parse::<f64>() {
            Ok(secs) => *slot = Some(Stamp::Secs(secs)),
            Err(_) => return false,
        },
        (false, Val::Null) => {}
        _ => return false,
    }
    true
}

impl<'a> Raw<'a> {
    /// The fast path ([`json_fast::scan`]); `None`: let serde_json decide.
    fn scanned(line: &'a str) -> Option<Raw<'a>> {
        let mut raw = Raw::default();
        let whole = json_fast::scan(line, |key, v| match key {
            "remote_addr" => text(&mut raw.remote_addr, v),
            "client_ip" => text(&mut raw.client_ip, v),
            "ip" => text(&mut raw.ip, v),
            "client" => text(&mut raw.client, v),
            "msec" => stamp(&mut raw.msec, v),
            "time_iso8601" => stamp(&mut raw.time_iso8601, v),
            "time" => stamp(&mut raw.time, v),
            "timestamp" => stamp(&mut raw.timestamp, v),
            "@timestamp" => stamp(&mut raw.at_timestamp, v),
            "time_local" => stamp(&mut raw.time_local, v),
            "request" => text(&mut raw.request, v),
            "method" => text(&mut raw.method, v),
            "request_method" => text(&mut raw.request_method, v),
            "uri" => text(&mut raw.uri, v),
            "request_uri" => text(&mut raw.request_uri, v),
            "path" => text(&mut raw.path, v),
            "http_x_forwarded_for" => text(&mut raw.http_x_forwarded_for, v),
            "xff" => text(&mut raw.xff, v),
            "x_forwarded_for" => text(&mut raw.x_forwarded_for, v),
            "http_cookie" => text(&mut raw.http_cookie, v),
            "cookie" => text(&mut raw.cookie, v),
            "http_authorization" => text(&mut raw.http_authorization, v),
            "authorization" => text(&mut raw.authorization, v),
            "http_x_api_key" => text(&mut raw.http_x_api_key, v),
            "api_key" => text(&mut raw.api_key, v),
            "http_signature_agent" => text(&mut raw.http_signature_agent, v),
            "signature_agent" => text(&mut raw.signature_agent, v),
            _ => true,
        });
        whole.then_some(raw)
    }
}

fn first<'a, const N: usize>(options: [Text<'a>; N]) -> Text<'a> {
    options.into_iter().flatten().find_map(present)
}

/// Parses one JSON line.
pub fn parse(line: &str) -> Result<LogLine<'_>, Malformed> {
    let raw = match Raw::scanned(line) {
        Some(raw) => raw,
        None => serde_json::from_str(line).map_err(|_| Malformed::Syntax)?,
    };
    let addr =
        first([raw.remote_addr, raw.client_ip, raw.ip, raw.client]).ok_or(Malformed::Address)?;
    let stamp = [
        raw.msec,
        raw.time_iso8601,
        raw.time,
        raw.timestamp,
        raw.at_timestamp,
        raw.time_local,
    ]
    .into_iter()
    .flatten()
    .next()
    .ok_or(Malformed::Time)?;
    let time_ms = stamp.ms().ok_or(Malformed::Time)?;
    let (method, target) = match raw.request.and_then(present) {
        Some(Cow::Borrowed(r)) => {
            let (m, t) = split_request(r).ok_or(Malformed::Request)?;
            (Cow::Borrowed(m), Cow::Borrowed(t))
        }
        Some(Cow::Owned(r)) => {
            let (m, t) = split_request(&r).ok_or(Malformed::Request)?;
            (Cow::Owned(m.to_string()), Cow::Owned(t.to_string()))
        }
        None => {
            let method = first([raw.method, raw.request_method, None]).ok_or(Malformed::Request)?;
            let target = first([raw.uri, raw.request_uri, raw.path]).ok_or(Malformed::Request)?;
            (method, target)
        }
    };
    Ok(LogLine {
        addr,
        time_ms,
        method,
        target,
        xff: first([raw.http_x_forwarded_for, raw.xff, raw.x_forwarded_for]),
        cookie: first([raw.http_cookie, raw.cookie, None]),
        authorization: first([raw.http_authorization, raw.authorization, None]),
        api_key: first([raw.http_x_api_key, raw.api_key, None]),
        signature_agent: first([raw.http_signature_agent, raw.signature_agent, None]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_nginx_json_line() {
        let line = r#"{"msec":"971211336.250","remote_addr":"203.0.113.7","request":"GET /a?b HTTP/1.1","status":200,"http_cookie":"session=x","http_x_forwarded_for":"-","http_user_agent":"curl/8"}"#;
        let l = parse(line).unwrap();
        assert_eq!(l.addr, "203.0.113.7");
        assert_eq!(l.time_ms, 971_211_336_250);
        assert_eq!((&*l.method, &*l.target), ("GET", "/a?b"));
        assert_eq!(l.cookie.as_deref(), Some("session=x"));
        assert_eq!(l.xff, None);
    }

    #[test]
    fn method_and_path_fields_numeric_time_and_escapes() {
        let line = r#"{"ip":"::1","time":971211336,"method":"POST","path":"/a\"b","authorization":"Bearer t"}"#;
        let l = parse(line).unwrap();
        assert_eq!(l.time_ms, 971_211_336_000);
        assert_eq!((&*l.method, &*l.target), ("POST", "/a\"b"));
        assert_eq!(l.authorization.as_deref(), Some("Bearer t"));
        let iso = r#"{"remote_addr":"1.2.3.4","time_iso8601":"2000-10-10T22:55:36+02:00","request":"GET / HTTP/1.1"}"#;
        assert_eq!(parse(iso).unwrap().time_ms, 971_211_336_000);
    }

    /// A line of the daemon's own access log (`[log] access_format = "json"`).
    #[test]
    fn the_daemons_own_json_line() {
        let line = r#"{"time":"2000-10-10T20:55:36.120Z","surface":"proxy","client":"203.0.113.7","peer":"10.0.0.2","method":"GET","host":"h","path":"/api/x","protocol":"HTTP/1.1","status":429,"bytes":3,"duration_ms":0.5,"tier":"anon","action":"reject","reason":"burst","delay_ms":0,"identity":"ip:ab","user_agent":"curl/8"}"#;
        let l = parse(line).unwrap();
        assert_eq!(l.addr, "203.0.113.7");
        assert_eq!(l.time_ms, 971_211_336_120);
        assert_eq!((&*l.method, &*l.target), ("GET", "/api/x"));
    }

    #[test]
    fn malformed_lines_say_why() {
        let cases = [
            ("", Malformed::Syntax),
            ("{", Malformed::Syntax),
            ("[1,2]", Malformed::Syntax),
            (r#"{"remote_addr":5}"#, Malformed::Syntax),
            (
                r#"{"time":1,"request":"GET / HTTP/1.1"}"#,
                Malformed::Address,
            ),
            (
                r#"{"remote_addr":"1.2.3.4","request":"GET / HTTP/1.1"}"#,
                Malformed::Time,
            ),
            (
                r#"{"remote_addr":"1.2.3.4","time":"soon","request":"GET /"}"#,
                Malformed::Time,
            ),
            (
                r#"{"remote_addr":"1.2.3.4","time":-5,"request":"GET /"}"#,
                Malformed::Time,
            ),
            (
                r#"{"remote_addr":"1.2.3.4","time":1,"request":"-"}"#,
                Malformed::Request,
            ),
            (r#"{"remote_addr":"1.2.3.4","time":1}"#, Malformed::Request),
        ];
        for (line, why) in cases {
            assert_eq!(parse(line).map(|_| ()), Err(why), "{line:?}");
        }
    }
}
