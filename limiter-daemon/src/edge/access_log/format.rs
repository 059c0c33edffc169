//! The two line formats, written into a buffer the writer reuses.
//!
//! - JSON: one object per line, `time` first (RFC 3339, milliseconds, UTC), then `surface`,
//!   `client`, `peer`, `method`, `host`, `path`, `protocol`, `status`, `bytes`,
//!   `duration_ms`, and when a decision was made `tier`, `action`, `reason` (refusals and
//!   delays), `delay_ms`, `identity` (hashed) and, in shadow mode, `shadow_action` /
//!   `shadow_reason`; `user_agent` last.
//! - `combined`: nginx's `$remote_addr - $remote_user [$time_local] "$request" $status
//!   $body_bytes_sent "$http_referer" "$http_user_agent"` with the resolved client as
//!   `$remote_addr`, the time in UTC (`+0000`), no referer (`"-"`), and `"` `\` and control
//!   bytes escaped as nginx escapes them (`\x22`), so tools written for nginx read it as is.

use std::io::Write as _;

use http::Version;

use super::record::Record;
use crate::config::log::AccessFormat;

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Appends `r` as one line (with its `\n`) to `out`.
pub fn line(format: AccessFormat, r: &Record, out: &mut Vec<u8>) {
    match format {
        AccessFormat::Json => json(r, out),
        AccessFormat::Combined => combined(r, out),
    }
    out.push(b'\n');
}

fn protocol(v: Version) -> &'static str {
    match v {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

/// `2026-12-06T01:52:38.123Z`.
fn rfc3339(r: &Record) -> String {
    humantime::format_rfc3339_millis(r.time()).to_string()
}

fn json_str(out: &mut Vec<u8>, s: &str) {
    // Writing a &str to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn field(out: &mut Vec<u8>, name: &str) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
}

fn json(r: &Record, out: &mut Vec<u8>) {
    let mut n = itoa::Buffer::new();
    out.extend_from_slice(b"{\"time\":");
    json_str(out, &rfc3339(r));
    field(out, "surface");
    json_str(out, r.surface.as_str());
    field(out, "client");
    let _ = write!(out, "\"{}\"", r.client);
    field(out, "peer");
    let _ = write!(out, "\"{}\"", r.peer);
    field(out, "method");
    json_str(out, r.method.as_str());
    field(out, "host");
    json_str(out, r.host());
    field(out, "path");
    json_str(out, r.path());
    field(out, "protocol");
    json_str(out, protocol(r.version));
    field(out, "status");
    out.extend_from_slice(n.format(r.status).as_bytes());
    field(out, "bytes");
    out.extend_from_slice(n.format(r.bytes).as_bytes());
    field(out, "duration_ms");
    let _ = write!(out, "{:.3}", r.duration_ms());
    if let Some(v) = &r.verdict {
        field(out, "tier");
        json_str(out, v.tier.as_str());
        field(out, "action");
        // A shed is no decision on the caller: its own action, `shed`.
        let shed = v.reason == Some(crate::model::Reason::Overload);
        json_str(out, if shed { "shed" } else { v.action.as_str() });
        if let Some(reason) = v.reason {
            field(out, "reason");
            json_str(out, reason.as_str());
        }
        field(out, "delay_ms");
        out.extend_from_slice(n.format(v.delay_ms).as_bytes());
        field(out, "identity");
        json_str(out, &v.identity);
        if let Some((action, reason)) = v.shadow {
            field(out, "shadow_action");
            json_str(out, action.as_str());
            if let Some(reason) = reason {
                field(out, "shadow_reason");
                json_str(out, reason.as_str());
            }
        }
    }
    field(out, "user_agent");
    json_str(out, r.user_agent());
    out.push(b'}');
}

/// nginx's escaping in `combined`: `"`, `\` and bytes outside printable ASCII as `\xHH`.
fn escaped(out: &mut Vec<u8>, s: &str) {
    for &b in s.as_bytes() {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            let _ = write!(out, "\\x{b:02X}");
        } else {
            out.push(b);
        }
    }
}

fn dash_or(out: &mut Vec<u8>, s: &str) {
    if s.is_empty() {
        out.push(b'-');
    } else {
        escaped(out, s);
    }
}

fn combined(r: &Record, out: &mut Vec<u8>) {
    let _ = write!(out, "{} - - [", r.client);
    // `2026-12-06T01:52:38.123Z` → `06/Dec/2026:01:52:38 +0000`.
    let t = rfc3339(r);
    let month = t[5..7].parse::<usize>().unwrap_or(1).clamp(1, 12);
    let _ = write!(
        out,
        "{}/{}/{}:{} +0000] \"",
        &t[8..10],
        MONTHS[month - 1],
        &t[0..4],
        &t[11..19]
    );
    escaped(out, r.method.as_str());
    out.push(b' ');
    dash_or(out, r.path());
    out.push(b' ');
    out.extend_from_slice(protocol(r.version).as_bytes());
    let mut n = itoa::Buffer::new();
    out.extend_from_slice(b"\" ");
    out.extend_from_slice(n.format(r.status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(n.format(r.bytes).as_bytes());
    out.extend_from_slice(b" \"-\" \"");
    dash_or(out, r.user_agent());
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use http::Method;

    use super::*;
    use crate::edge::access_log::record::{Seen, Surface};
    use crate::model::{Decision, Reason, Tier};

    fn record() -> Record {
        let mut r = Record::new(&Seen {
            surface: Surface::Proxy,
            peer: "10.0.0.2".parse().unwrap(),
            client: "203.0.113.7".parse().unwrap(),
            method: &Method::GET,
            version: Version::HTTP_11,
            host: b"example.org",
            path: "/a\"b?token=secret",
            user_agent: b"curl/8 \"x\"",
        });
        r.wall = UNIX_EPOCH + Duration::from_millis(971_211_336_120);
        r.status = 429;
        r.bytes = 311;
        r.duration_us = 1_500;
        let mut d = Decision::new(Tier::Anon, "ip:abc", None);
        d.reject(Reason::Burst, 30);
        r.decided(&d);
        r
    }

    #[test]
    fn json_lines_carry_every_field_and_never_the_query() {
        let mut out = Vec::new();
        line(AccessFormat::Json, &record(), &mut out);
        assert_eq!(out.last(), Some(&b'\n'));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["time"], "2000-10-10T20:55:36.120Z");
        assert_eq!(v["client"], "203.0.113.7");
        assert_eq!(v["peer"], "10.0.0.2");
        assert_eq!(v["method"], "GET");
        assert_eq!(v["host"], "example.org");
        assert_eq!(v["path"], "/a\"b");
        assert_eq!(v["status"], 429);
        assert_eq!(v["bytes"], 311);
        assert_eq!(v["duration_ms"], 1.5);
        assert_eq!(v["tier"], "anon");
        assert_eq!(v["action"], "reject");
        assert_eq!(v["reason"], "burst");
        assert_eq!(v["delay_ms"], 0);
        assert_eq!(v["identity"], "ip:abc");
        assert_eq!(v["user_agent"], "curl/8 \"x\"");
        assert_eq!(v["surface"], "proxy");
        assert!(!String::from_utf8_lossy(&out).contains("secret"));
    }

    #[test]
    fn combined_lines_read_as_nginx_writes_them() {
        let mut out = Vec::new();
        line(AccessFormat::Combined, &record(), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "203.0.113.7 - - [10/Oct/2000:20:55:36 +0000] \"GET /a\\x22b HTTP/1.1\" 429 311 \
             \"-\" \"curl/8 \\x22x\\x22\"\n"
        );
    }
}
