//! The upstream response-head rewrite (`front::response_head`) on arbitrary upstream bytes.
//!
//! Input: one flags byte (bit 0: the client asked with HEAD; bit 1: the client asked to close;
//! bits 2-3: which decision's fields are written), then what the upstream sent.
//!
//! Besides "never panics", as the proptest in `front.rs` asserts: a rewritten head ends with
//! the blank line and parses completely. And, beyond the proptest:
//! - its status is the upstream's final one (interim 1xx heads skipped), and exactly the
//!   upstream's head is taken off the buffer;
//! - no hop-by-hop field passes, except the proxy's own `Transfer-Encoding: chunked` (exactly
//!   when the body is re-chunked) and `Connection: close` (exactly when the client asked);
//! - never both `Content-Length` and `Transfer-Encoding`; a length-framed body's
//!   `Content-Length` says that length;
//! - the rate-limit fields are exactly the decision's, the upstream's own are replaced;
//! - every other field came from the upstream, and a `Date` is always there;
//! - no body after HEAD, 204 or 304.
#![no_main]

use std::time::Duration;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use limiter_daemon::fuzz_entry::{response_head, BodyKind};
use limiter_daemon::edge::h1::hop::is_hop_by_hop_name;
use limiter_daemon::edge::render::response::{is_rate_limit_field, write_header_lines};
use limiter_daemon::model::{Decision, DelayKind, Reason, Tier, WindowKind, WindowState};

fn window(kind: WindowKind, limit: u64, remaining: u64, window_secs: u64) -> WindowState {
    WindowState {
        kind,
        limit,
        remaining,
        window_secs,
        reset_secs: window_secs / 3,
    }
}

fn decision(which: u8) -> Decision {
    let mut d = Decision::builder(Tier::Anon, "ip:fuzz")
        .window(window(WindowKind::Hourly, 600, 599, 3600))
        .cost(1)
        .build();
    match which & 3 {
        0 => {}
        1 => {
            d.tier = Tier::Session;
            d.warn_remaining = Some(3);
            d.windows.push(window(WindowKind::Daily, 10_000, 3, 86_400));
        }
        2 => {
            d.hold(Duration::from_secs(5), DelayKind::Soft);
            d.windows.push(window(WindowKind::Daily, 1_000, 0, 86_400));
        }
        _ => {
            // A reject whose answer the client gets from the upstream is not reachable, but the
            // rewrite must still hold together with every field the renderer can write.
            d.reject(Reason::KeyHourly, 42);
            d.tier = Tier::Sponsor;
            d.windows = vec![
                window(WindowKind::Burst, 2_000, 0, 60),
                window(WindowKind::Hourly, 120_000, 7, 3600),
                window(WindowKind::KeyHourly, 5_000, 0, 3600),
            ];
        }
    }
    d
}

/// Field names (lower case) and values, in order.
type Fields = Vec<(String, Vec<u8>)>;

/// The upstream's final head, parsed independently: status, its fields, bytes before its end.
fn final_head(mut wire: &[u8]) -> Option<(u16, Fields, usize)> {
    let mut taken = 0;
    loop {
        let mut fields = [httparse::EMPTY_HEADER; 100];
        let mut resp = httparse::Response::new(&mut fields);
        let Ok(httparse::Status::Complete(len)) = resp.parse(wire) else {
            return None;
        };
        let code = resp.code.unwrap();
        if (100..200).contains(&code) {
            wire = &wire[len..];
            taken += len;
            continue;
        }
        let fields = resp
            .headers
            .iter()
            .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
            .collect();
        return Some((code, fields, taken + len));
    }
}

/// `value` without the optional whitespace (SP, HTAB) around it.
fn trim_ows(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

fn lower_fields(block: &[u8]) -> Fields {
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let Ok(httparse::Status::Complete(_)) = httparse::parse_headers(block, &mut fields) else {
        panic!(
            "rate-limit lines do not parse: {:?}",
            String::from_utf8_lossy(block)
        );
    };
    fields
        .iter()
        .take_while(|h| !h.name.is_empty())
        .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, wire)) = data.split_first() else {
        return;
    };
    let head_only = flags & 1 != 0;
    let close = flags & 2 != 0;
    let d = decision(flags >> 2);
    let mut ubuf = BytesMut::from(wire);
    let mut out = Vec::new();
    let Ok(Some(framing)) = response_head(&mut ubuf, head_only, &d, close, &mut out) else {
        return;
    };

    // The proptest's invariant.
    assert!(out.ends_with(b"\r\n\r\n"));
    let mut fields = [httparse::EMPTY_HEADER; 256];
    let mut resp = httparse::Response::new(&mut fields);
    assert_eq!(
        resp.parse(&out),
        Ok(httparse::Status::Complete(out.len())),
        "{:?}",
        String::from_utf8_lossy(&out)
    );

    let (code, upstream_fields, upstream_len) =
        final_head(wire).expect("a rewritten head comes from a complete upstream head");
    assert_eq!(resp.code, Some(code));
    assert_eq!(resp.version, Some(1));
    assert_eq!(
        &ubuf[..],
        &wire[upstream_len..],
        "exactly the head is taken"
    );

    let ours: Fields = resp
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
        .collect();
    let named = |n: &'static str| ours.iter().filter(move |(k, _)| k == n);

    let rechunked = matches!(framing.body, BodyKind::Chunked | BodyKind::UntilClose);
    let te: Vec<_> = named("transfer-encoding").collect();
    assert_eq!(te.len(), usize::from(rechunked), "{te:?}");
    assert!(te.iter().all(|(_, v)| v == b"chunked"));
    let conn: Vec<_> = named("connection").collect();
    assert_eq!(conn.len(), usize::from(close), "{conn:?}");
    assert!(conn.iter().all(|(_, v)| v == b"close"));
    for (k, _) in &ours {
        assert!(
            !is_hop_by_hop_name(k.as_bytes()) || k == "transfer-encoding" || k == "connection",
            "hop-by-hop {k} passed to the client"
        );
    }
    let lengths: Vec<_> = named("content-length").collect();
    assert!(
        lengths.is_empty() || te.is_empty(),
        "both Content-Length and Transfer-Encoding"
    );
    if let BodyKind::Length(n) = framing.body {
        for (_, v) in &lengths {
            for part in v.split(|&b| b == b',') {
                // RFC 9110 §8.6: `1*DIGIT`, and OWS around list elements.
                let digits = trim_ows(part);
                assert!(
                    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit),
                    "Content-Length {:?} passed to the client",
                    String::from_utf8_lossy(v)
                );
                let text = std::str::from_utf8(digits).unwrap();
                assert_eq!(text.parse::<u64>().ok(), Some(n), "Content-Length {v:?}");
            }
        }
    }
    if head_only || code == 204 || code == 304 {
        assert_eq!(framing.body, BodyKind::None);
    }

    // Rate-limit fields: the decision's, nothing of the upstream's.
    let mut lines = Vec::new();
    write_header_lines(&d, &mut lines);
    lines.extend_from_slice(b"\r\n");
    let expected = lower_fields(&lines);
    let rate: Vec<_> = ours
        .iter()
        .filter(|(k, _)| is_rate_limit_field(k.as_bytes()))
        .cloned()
        .collect();
    assert_eq!(rate, expected);

    // The rest came from the upstream.
    for (k, v) in &ours {
        let own = is_rate_limit_field(k.as_bytes())
            || k == "transfer-encoding"
            || k == "connection"
            || k == "date";
        if !own {
            assert!(
                upstream_fields.iter().any(|(uk, uv)| uk == k && uv == v),
                "{k} was not in the upstream's head"
            );
        }
    }
    assert!(named("date").next().is_some(), "no Date");
});
