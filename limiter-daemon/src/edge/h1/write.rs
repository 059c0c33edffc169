//! Writing HTTP/1.1 heads and whole answers as bytes: one field line, the end of a head
//! (`Date` when asked, `Connection: close` when closing), and a response the daemon wrote
//! itself (429, 503, 431, 400, 502, 504) with its `Content-Length`.

use std::time::SystemTime;

use bytes::Bytes;
use http::Response;

pub(crate) fn push_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `Date` (when asked), `Connection: close` (when closing) and the blank line.
pub(crate) fn finish_head(out: &mut Vec<u8>, date: bool, close: bool) {
    if date {
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(httpdate::fmt_http_date(SystemTime::now()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// A whole answer written by the daemon (429, 503, 431, 400, 502, 504).
pub(crate) fn write_answer(
    out: &mut Vec<u8>,
    resp: &Response<Bytes>,
    head_only: bool,
    close: bool,
) {
    let status = resp.status();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in resp.headers() {
        push_field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    let body = resp.body();
    // RFC 9110 §8.6: never on a 204 (a forward-auth allow).
    if status != http::StatusCode::NO_CONTENT {
        let mut len = itoa::Buffer::new();
        push_field(out, b"content-length", len.format(body.len()).as_bytes());
    }
    finish_head(out, true, close);
    if !head_only {
        out.extend_from_slice(body);
    }
}
