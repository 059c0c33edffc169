//! The own loop's request-head inspection: parses the head at the front of the read buffer in
//! place, decides whether the loop serves it, refuses what is malformed, over the limits or
//! against the request rules, and writes the head to send upstream (hop-by-hop fields left
//! out, `X-Forwarded-For` folded and appended). The decision's view gets every field the
//! decider reads, exactly as hyper's path would hand them over.

use std::mem::MaybeUninit;
use std::net::IpAddr;
use std::ops::Range;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Response};

use crate::edge::h1::hop::{ip_text, is_hop_by_hop_name};
use crate::edge::h1::write::push_field;
use crate::edge::limits::{too_large, HeaderLimitError, HeaderLimits};
use crate::edge::render::problem;
use crate::engine::decider::Decider;
use crate::proxy::request_rules;

/// Request fields parsed per head; a head with more gets `431` (the configured limit must be
/// below this for the loop to run at all).
pub(crate) const MAX_FIELDS: usize = 128;

/// What [`inspect`] needs besides the bytes.
pub(crate) struct Scope<'a> {
    pub(crate) limits: HeaderLimits,
    pub(crate) decider: &'a dyn Decider,
    pub(crate) peer: IpAddr,
}

/// What the bytes at the front of the buffer are.
#[derive(Debug)]
pub(crate) enum Inspected {
    Partial,
    Serve(Plan),
    HandOver,
    /// Answer this and close: the head is malformed or over the limits.
    Refuse(Response<Bytes>),
}

/// A request head this loop serves; its bytes stay at the front of the buffer until answered.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) len: usize,
    pub(crate) method: Method,
    /// The request target's path (without the query) within the head.
    pub(crate) path: Range<usize>,
    /// The client sent `Connection: close`.
    pub(crate) close: bool,
    /// The fields the decision may read, and `Accept` (a refusal's format), and no others.
    pub(crate) fields: HeaderMap,
}

impl Plan {
    pub(crate) fn path<'b>(&self, head: &'b [u8]) -> &'b str {
        // Checked to be UTF-8 by `inspect`.
        std::str::from_utf8(&head[self.path.clone()]).unwrap_or("/")
    }
}

/// Parses the request head at the front of `buf`; for a request this loop serves, writes the
/// head to send upstream into `up`.
pub(crate) fn inspect(buf: &[u8], cx: &Scope<'_>, up: &mut Vec<u8>) -> Inspected {
    // Left uninitialised: httparse initialises what it fills.
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_request_with_uninit_headers(&mut req, buf, &mut slots)
    {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Inspected::Partial,
        Err(httparse::Error::TooManyHeaders) => {
            return Inspected::Refuse(too_large(HeaderLimitError::CountOver {
                parsed: MAX_FIELDS,
                max: cx.limits.max_count,
            }))
        }
        Err(e) => {
            return Inspected::Refuse(problem::bad_request(format!(
                "Malformed request head ({e}); send an HTTP/1.1 request."
            )))
        }
    };
    let method = match req.method {
        Some("GET") => Method::GET,
        Some("HEAD") => Method::HEAD,
        Some("OPTIONS") => Method::OPTIONS,
        _ => return Inspected::HandOver,
    };
    let Some(target) = req.path.filter(|t| t.starts_with('/')) else {
        return Inspected::HandOver;
    };
    if req.version != Some(1) {
        return Inspected::HandOver;
    }
    if target.len() > request_rules::MAX_TARGET_BYTES {
        return Inspected::Refuse(request_rules::target_too_long(target.len()));
    }
    if let Some(resp) = request_rules::path_problem(target) {
        return Inspected::Refuse(resp);
    }
    let bytes = req
        .headers
        .iter()
        .map(|h| h.name.len() + h.value.len() + 4)
        .sum();
    if let Err(err) = cx.limits.check_sizes(req.headers.len(), bytes) {
        tracing::debug!(peer = %cx.peer, %err, "request head over limits");
        return Inspected::Refuse(too_large(err));
    }
    let is = |h: &httparse::Header<'_>, name: &str| h.name.eq_ignore_ascii_case(name);
    up.clear();
    up.extend_from_slice(method.as_str().as_bytes());
    up.push(b' ');
    up.extend_from_slice(target.as_bytes());
    up.extend_from_slice(b" HTTP/1.1\r\n");
    let mut close = false;
    let mut forwarded_for = 0;
    let mut fields = HeaderMap::new();
    for h in req.headers.iter() {
        if ["content-length", "transfer-encoding", "upgrade", "expect"]
            .iter()
            .any(|n| is(h, n))
        {
            return Inspected::HandOver;
        }
        // Before any field is skipped on its way upstream: the decision sees every field it
        // reads, exactly as hyper's path hands it the whole map (a trusted proxy's
        // `X-Forwarded-For` above all), and a refusal sees `Accept` (a browser gets a page).
        if cx.decider.reads_header(h.name.as_bytes()) || is(h, "accept") {
            match (
                HeaderName::from_bytes(h.name.as_bytes()),
                HeaderValue::from_bytes(h.value),
            ) {
                (Ok(n), Ok(v)) => {
                    fields.append(n, v);
                }
                _ => return Inspected::HandOver,
            }
        }
        if is(h, "connection") {
            for token in h.value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if !token.is_empty() && !token.eq_ignore_ascii_case(b"keep-alive") {
                    // It names fields to strip: hyper's path does that.
                    return Inspected::HandOver;
                }
            }
            continue;
        }
        if is_hop_by_hop_name(h.name.as_bytes()) {
            continue;
        }
        if is(h, "x-forwarded-for") {
            forwarded_for += 1;
            continue;
        }
        push_field(up, h.name.as_bytes(), h.value);
    }
    let hosts = req
        .headers
        .iter()
        .filter(|h| is(h, "host"))
        .map(|h| h.value);
    if let Some(resp) = request_rules::host_problem(true, hosts) {
        return Inspected::Refuse(resp);
    }
    // Earlier hops first, folded into one field, then this client.
    up.extend_from_slice(b"x-forwarded-for: ");
    for h in req
        .headers
        .iter()
        .filter(|h| forwarded_for > 0 && is(h, "x-forwarded-for"))
    {
        up.extend_from_slice(h.value);
        up.extend_from_slice(b", ");
    }
    up.extend_from_slice(ip_text(cx.peer, &mut [0; 48]));
    up.extend_from_slice(b"\r\n\r\n");
    let path_len = target.find('?').unwrap_or(target.len());
    let start = target.as_ptr() as usize - buf.as_ptr() as usize;
    if std::str::from_utf8(&buf[start..start + path_len]).is_err() {
        return Inspected::HandOver;
    }
    Inspected::Serve(Plan {
        len,
        method,
        path: start..start + path_len,
        close,
        fields,
    })
}
