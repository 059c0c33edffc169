//! The API listener's own HTTP/1.1 loop for forward auth: a bodyless HTTP/1.1 request to
//! `/v1/auth` or `/v1/auth/envoy[/…]` (what nginx, Caddy, Traefik, HAProxy and Envoy send per
//! request of theirs) is parsed in place (httparse), passed the token check and answered
//! ([`auth_request::answer`]), its access log line written as the router's middleware writes
//! it. Anything else (`POST /v1/decide`, a body, another path, HEAD, HTTP/1.0, a head it cannot
//! parse or that outgrows [`HEAD_CAP`]) hands the connection, with the bytes already read, to
//! hyper and axum's router for the rest of its life ([`crate::edge::listen::serve`]).
//!
//! Why: through hyper and axum one forward-auth call cost 16–19 µs of daemon CPU, several
//! times the decision (figures in docs/benchmarks.md). The answer is the router's, byte for
//! byte but for field order; keep-alive, the head-read timeout (idle connections included)
//! and the stop signals are the listener's.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::{pin, Pin};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, EXPECT, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri, Version};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::edge::h1::write::write_answer;
use crate::edge::listen::serve::{Life, OwnLoop};
use crate::surfaces::api::auth_convention::ENVOY_PREFIX;
use crate::surfaces::api::state::ApiState;
use crate::surfaces::api::{access, auth_request, token};

/// Read-buffer growth per read.
const READ_SIZE: usize = 8 * 1024;
/// A head still incomplete past this many bytes goes to hyper, which refuses it as before.
const HEAD_CAP: usize = 64 * 1024;
/// hyper's own ceiling on a head's fields: a head with more is hyper's to refuse.
const MAX_FIELDS: usize = 100;

/// The API listener's [`OwnLoop`].
pub struct AuthLoop(pub ApiState);

impl OwnLoop for AuthLoop {
    fn serve<'a>(
        &'a self,
        stream: &'a mut TcpStream,
        peer: SocketAddr,
        life: &'a Life,
    ) -> Pin<Box<dyn Future<Output = Option<Bytes>> + Send + 'a>> {
        Box::pin(serve_loop(&self.0, stream, peer.ip(), life))
    }
}

async fn serve_loop(
    state: &ApiState,
    stream: &mut TcpStream,
    peer: IpAddr,
    life: &Life,
) -> Option<Bytes> {
    let timeout = life.header_read_timeout;
    let mut timer = pin!(tokio::time::sleep(timeout));
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    loop {
        let since = Instant::now();
        let (len, mut parts, close) = loop {
            if !buf.is_empty() {
                match parse(&buf) {
                    Parsed::Serve(len, parts, close) => break (len, parts, close),
                    Parsed::HandOver => return Some(buf.freeze()),
                    Parsed::Partial if buf.len() > HEAD_CAP => return Some(buf.freeze()),
                    Parsed::Partial => {}
                }
            }
            buf.reserve(READ_SIZE);
            tokio::select! {
                biased;
                read = std::future::poll_fn(|cx| {
                    tokio_util::io::poll_read_buf(Pin::new(&mut *stream), cx, &mut buf)
                }) => match read {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                },
                () = &mut timer => {
                    // One timer per connection, moved to this head's deadline when still ahead.
                    let due = since + timeout;
                    if Instant::now() >= due {
                        tracing::debug!(%peer, "request head not received within the header read timeout");
                        return None;
                    }
                    timer.as_mut().reset(due);
                },
                () = life.closing.cancelled(), if buf.is_empty() => return None,
                () = life.dropping.cancelled() => return None,
            }
        };
        buf.advance(len);
        let line = access::start(state, peer, &parts);
        let answer = async {
            token::admit(state, &mut parts.headers)?;
            let headers = std::mem::take(&mut parts.headers);
            Ok(auth_request::answer(state, peer, &parts.method, &parts.uri, headers).await)
        };
        let resp = tokio::select! {
            resp = answer => resp.unwrap_or_else(|refused: Box<http::Response<Bytes>>| *refused),
            () = life.dropping.cancelled() => return None,
            // A front end that gave up on a held answer: the decision is dropped with it.
            () = hung_up(stream) => return None,
        };
        let close = close || life.closing.is_cancelled();
        out.clear();
        write_answer(&mut out, &resp, false, close);
        access::finish(state, line, &resp, resp.body().len() as u64);
        // A client that reads no answers must not hold the listener's shutdown past its grace.
        let wrote = tokio::select! {
            wrote = stream.write_all(&out) => wrote.is_ok(),
            () = life.dropping.cancelled() => false,
        };
        if !wrote || close {
            return None;
        }
    }
}

/// Resolves when the client closes its side (never, once it sends more: it is read later).
async fn hung_up(stream: &TcpStream) {
    if let Ok(1..) = stream.peek(&mut [0u8; 1]).await {
        std::future::pending().await
    }
}

/// What [`parse`] made of the buffer's first bytes.
// Made and taken apart once per request, on the stack: boxing would cost an allocation.
#[allow(clippy::large_enum_variant)]
enum Parsed {
    /// A head this loop serves: its length, the request, whether the client asked to close.
    Serve(usize, http::request::Parts, bool),
    HandOver,
    Partial,
}

fn parse(buf: &[u8]) -> Parsed {
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut fields);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::HandOver,
    };
    let (Some(1), Some(method), Some(target)) = (req.version, req.method, req.path) else {
        return Parsed::HandOver;
    };
    let path = target.split('?').next().unwrap_or_default();
    let envoy = path.strip_prefix(ENVOY_PREFIX);
    // The router's routes: `/v1/auth`, the prefix, the prefix with a non-empty rest.
    let routed = path == "/v1/auth"
        || envoy
            .is_some_and(|r| r.is_empty() || r.strip_prefix('/').is_some_and(|r| !r.is_empty()));
    let method = match Method::from_bytes(method.as_bytes()) {
        Ok(m) if m != Method::HEAD && m != Method::CONNECT => m,
        _ => return Parsed::HandOver,
    };
    let Ok(uri) = target.parse::<Uri>() else {
        return Parsed::HandOver;
    };
    if !routed {
        return Parsed::HandOver;
    }
    let mut headers = HeaderMap::with_capacity(req.headers.len());
    let mut close = false;
    for f in req.headers.iter() {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(f.name.as_bytes()),
            HeaderValue::from_bytes(f.value),
        ) else {
            return Parsed::HandOver;
        };
        if [CONTENT_LENGTH, TRANSFER_ENCODING, EXPECT, UPGRADE].contains(&name) {
            return Parsed::HandOver;
        }
        if name == CONNECTION {
            close |= f
                .value
                .split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"));
        }
        headers.append(name, value);
    }
    let (mut parts, ()) = http::Request::new(()).into_parts();
    (parts.method, parts.uri, parts.version) = (method, uri, Version::HTTP_11);
    parts.headers = headers;
    Parsed::Serve(len, parts, close)
}
