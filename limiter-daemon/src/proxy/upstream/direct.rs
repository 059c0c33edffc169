//! The direct path to the upstream, taken by most proxied traffic: a request without a body
//! whose method is safe to repeat (GET, HEAD, OPTIONS) is written, and its response head read, by
//! the request's own task on a pooled plain TCP connection; [`DirectBody`] then reads the body as
//! the server polls it. Requests with a body go through hyper's client ([`crate::proxy::upstream::client`]),
//! which sends the body while it reads the answer.
//!
//! Why a second path: hyper's connection-level client drives every connection from a task of its
//! own and passes each request, response and body chunk over channels. On the small responses
//! crawlers fetch, that machinery was about a fifth of the proxy's CPU per request (profile and
//! figures in docs/http.md). Here nothing is spawned and nothing crosses a channel.
//!
//! Framing follows RFC 9112 §6.3: no body after HEAD, 1xx, 204 and 304; chunked (decoded by
//! [`crate::edge::h1::chunked`]) when the last transfer coding is chunked; else Content-Length; else until
//! the upstream closes. A connection is reused only after an HTTP/1.1 response without
//! `Connection: close` was read to its end with nothing left over.
//!
//! An idle pooled connection the upstream has closed shows up as a failed write or as an empty
//! read before any response byte; the request then goes out once more on a fresh connection,
//! which is safe because only idempotent methods without a body take this path.

use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use http::header::{CONTENT_LENGTH, HOST};
use http::{request, HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode, Version};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::edge::h1::chunked::Step;
use crate::edge::h1::framing::{
    body_framing, with_final_head, Framing, WireError, MAX_HEADERS, MAX_HEAD_BYTES,
};
use crate::proxy::upstream::client::Upstream;
use crate::proxy::upstream::conn::{DirectConn, READ_SIZE};
use crate::proxy::upstream::error::UpstreamError;
use crate::proxy::upstream::pool::Slot;

/// Fields the proxy adds to a response (`crate::edge::render::response::write_headers` writes at most 9).
const RESPONSE_FIELDS_ADDED: usize = 10;

/// Whether `req` may take the direct path.
pub(crate) fn eligible(req: &http::Request<Incoming>) -> bool {
    matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        && req.body().is_end_stream()
}

/// Writes the request head: origin-form target, HTTP/1.1, the headers as given, `Host` added
/// when missing.
fn encode_head(parts: &request::Parts, host: Option<&HeaderValue>, out: &mut Vec<u8>) {
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if !parts.headers.contains_key(HOST) {
        if let Some(h) = host {
            out.extend_from_slice(b"host: ");
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    for (name, value) in &parts.headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// A parsed response head, its body framing, and whether the connection may be reused.
struct Head {
    response: http::response::Parts,
    framing: Option<Framing>,
    keep_alive: bool,
}

/// Parses a complete response head off the front of `buf` (skipping interim 1xx responses);
/// `None` when more bytes are needed.
fn parse_head(buf: &mut BytesMut, head_only: bool) -> Result<Option<Head>, WireError> {
    // Offsets into the head, so values can be zero-copy slices of it once it is frozen.
    let base = buf.as_ptr() as usize;
    let mut spans = [(0usize, 0usize, 0usize, 0usize); MAX_HEADERS];
    let Some(((status, version, count, body), len)) = with_final_head(buf, |parsed| {
        for (span, f) in spans.iter_mut().zip(parsed.headers.iter()) {
            *span = (
                f.name.as_ptr() as usize - base,
                f.name.len(),
                f.value.as_ptr() as usize - base,
                f.value.len(),
            );
        }
        let code = parsed.code.unwrap_or(0);
        Ok((
            code,
            parsed.version,
            parsed.headers.len(),
            body_framing(code, parsed.version, parsed.headers, head_only)?,
        ))
    })?
    else {
        return Ok(None);
    };
    // Interim responses were consumed in front of the head: offsets are relative to the old
    // start, so shift them by what was skipped.
    let skipped = buf.as_ptr() as usize - base;
    let head = buf.split_to(len).freeze();
    // Room for the rate-limit fields the proxy adds, so adding them never regrows the map.
    let mut headers = HeaderMap::with_capacity(count + RESPONSE_FIELDS_ADDED);
    for &(n, nl, v, vl) in &spans[..count] {
        let (n, v) = (n - skipped, v - skipped);
        let name = HeaderName::from_bytes(&head[n..n + nl])
            .map_err(|_| WireError::Malformed("invalid header name".into()))?;
        if body.drop_content_length && name == CONTENT_LENGTH {
            continue;
        }
        let value = HeaderValue::from_maybe_shared(head.slice(v..v + vl))
            .map_err(|_| WireError::Malformed(format!("invalid value for {name}")))?;
        headers.append(name, value);
    }
    let mut response = Response::new(()).into_parts().0;
    response.status = StatusCode::from_u16(status)
        .map_err(|_| WireError::Malformed(format!("status code {status}")))?;
    response.version = if version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    response.headers = headers;
    Ok(Some(Head {
        response,
        framing: body.framing,
        keep_alive: body.keep_alive,
    }))
}

/// One read into `buf`'s spare capacity (reserved by the caller). Through `AsyncRead` rather
/// than `try_read`: tokio then takes a short read to mean the socket is drained, so the next
/// exchange on a pooled connection waits for the response instead of first trying a read that
/// can only fail (one `recvfrom` less per request, measured in docs/http.md).
fn poll_read_buf(
    stream: &mut TcpStream,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
) -> Poll<io::Result<usize>> {
    tokio_util::io::poll_read_buf(Pin::new(stream), cx, buf)
}

/// Writes `head` on `conn` and reads until `decode` takes a response head off the buffer.
async fn exchange<T>(
    conn: &mut DirectConn,
    head: &[u8],
    decode: &mut impl FnMut(&mut BytesMut) -> Result<Option<T>, WireError>,
) -> Result<T, WireError> {
    conn.stream
        .write_all(head)
        .await
        .map_err(WireError::Write)?;
    loop {
        if !conn.buf.is_empty() {
            if let Some(head) = decode(&mut conn.buf)? {
                return Ok(head);
            }
            if conn.buf.len() >= MAX_HEAD_BYTES {
                return Err(WireError::HeadTooLarge);
            }
        }
        conn.buf.reserve(READ_SIZE);
        let got_bytes = !conn.buf.is_empty();
        let n = std::future::poll_fn(|cx| poll_read_buf(&mut conn.stream, cx, &mut conn.buf))
            .await
            .map_err(|source| WireError::Read { source, got_bytes })?;
        if n == 0 {
            return Err(WireError::Closed { got_bytes });
        }
    }
}

impl Upstream {
    /// Sends a bodyless idempotent request on the direct path; see the module docs.
    pub(crate) async fn send_direct(
        self: &Arc<Self>,
        parts: request::Parts,
    ) -> Result<Response<DirectBody>, UpstreamError> {
        let head_only = parts.method == Method::HEAD;
        let mut head = Vec::with_capacity(256 + parts.headers.len() * 32);
        encode_head(&parts, self.host_header(), &mut head);
        let (head, conn) = self
            .exchange_direct(&head, |buf| parse_head(buf, head_only))
            .await?;
        let body = DirectBody::new(conn, head.framing, head.keep_alive, self);
        Ok(Response::from_parts(head.response, body))
    }

    /// Sends the encoded request `head` (bodyless, idempotent) on a pooled connection, retrying
    /// once on a fresh one if the pooled one was dead, and reads until `decode` takes the
    /// response head; all within the response timeout. The body is left on the connection.
    pub(crate) async fn exchange_direct<T>(
        &self,
        head: &[u8],
        mut decode: impl FnMut(&mut BytesMut) -> Result<Option<T>, WireError>,
    ) -> Result<(T, DirectConn), UpstreamError> {
        let attempt = async {
            let (mut conn, pooled) = self.checkout_direct(true).await?;
            match exchange(&mut conn, head, &mut decode).await {
                Ok(h) => Ok((h, conn)),
                Err(e) if pooled && e.is_stale() => {
                    // Closed first: its slot under the cap is the one to reuse.
                    drop(conn);
                    let (mut conn, _) = self.checkout_direct(false).await?;
                    match exchange(&mut conn, head, &mut decode).await {
                        Ok(h) => Ok((h, conn)),
                        Err(e) => Err(self.failed(Box::new(e))),
                    }
                }
                Err(e) => Err(self.failed(Box::new(e))),
            }
        };
        self.within_response_timeout(attempt).await
    }

    pub(crate) async fn connect_direct(&self, slot: Slot) -> Result<DirectConn, UpstreamError> {
        Ok(DirectConn::new(self.connect_stream().await?, slot))
    }
}

/// A response body read straight off the upstream connection; the connection goes back to the
/// pool once the body has been read to its end.
pub struct DirectBody {
    /// `None` once the body is finished or broken.
    conn: Option<DirectConn>,
    /// `None`: no body.
    framing: Option<Framing>,
    keep_alive: bool,
    pool: Arc<Upstream>,
}

impl DirectBody {
    /// The body after a response head taken off `conn`; a body that is already complete (none,
    /// or all of it buffered and nothing more) gives its connection back at once.
    pub(crate) fn new(
        conn: DirectConn,
        framing: Option<Framing>,
        keep_alive: bool,
        pool: &Arc<Upstream>,
    ) -> Self {
        let mut body = DirectBody {
            conn: Some(conn),
            framing,
            keep_alive,
            pool: Arc::clone(pool),
        };
        if body.is_end_stream() {
            body.finish();
        }
        body
    }

    /// Ends the exchange: the connection returns to the pool if it is clean, else closes.
    fn finish(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        let complete = self.framing.as_ref().is_none_or(Framing::is_complete);
        // Bytes past the end of a response were not asked for: the connection is out of step.
        if self.keep_alive && complete && conn.buf.is_empty() {
            self.pool.put_back_direct(conn);
        }
    }

    fn broken(&mut self, err: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
        self.conn = None;
        self.pool.counters.failed.fetch_add(1, Ordering::Relaxed);
        io::Error::new(io::ErrorKind::InvalidData, err)
    }
}

/// What the buffered bytes allow next.
enum Next {
    Data(Bytes),
    /// The framing says the body is over.
    End,
    /// Nothing usable is buffered: read more.
    Read,
}

impl Body for DirectBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            let next = match &mut this.framing {
                None | Some(Framing::Length(0)) => Next::End,
                _ if conn.buf.is_empty() => Next::Read,
                Some(Framing::Length(left)) => {
                    let take = usize::try_from(*left)
                        .unwrap_or(usize::MAX)
                        .min(conn.buf.len());
                    *left -= take as u64;
                    Next::Data(conn.buf.split_to(take).freeze())
                }
                Some(Framing::Chunked(decoder)) => match decoder.decode(&mut conn.buf) {
                    Ok(Step::Data(b)) => Next::Data(b),
                    Ok(Step::Done) => Next::End,
                    Ok(Step::NeedMore) => Next::Read,
                    Err(e) => return Poll::Ready(Some(Err(this.broken(e)))),
                },
                Some(Framing::UntilClose) => Next::Data(conn.buf.split().freeze()),
            };
            match next {
                Next::Data(b) => {
                    if this.framing.as_ref().is_some_and(Framing::is_complete) {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                Next::End => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Next::Read => {}
            }
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            conn.buf.reserve(READ_SIZE);
            match ready!(poll_read_buf(&mut conn.stream, cx, &mut conn.buf)) {
                Ok(0) if matches!(this.framing, Some(Framing::UntilClose)) => {
                    this.conn = None;
                    return Poll::Ready(None);
                }
                Ok(0) => {
                    return Poll::Ready(Some(Err(
                        this.broken("the upstream closed the connection inside the body")
                    )))
                }
                Ok(_) => {}
                Err(e) => return Poll::Ready(Some(Err(this.broken(e)))),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.conn.is_none() || self.framing.as_ref().is_none_or(Framing::is_complete)
    }

    fn size_hint(&self) -> SizeHint {
        match &self.framing {
            None => SizeHint::with_exact(0),
            Some(Framing::Length(n)) => SizeHint::with_exact(*n),
            Some(_) => SizeHint::default(),
        }
    }
}

impl Drop for DirectBody {
    fn drop(&mut self) {
        // Dropped after its last frame (the server may not poll past a known length): reusable.
        // Dropped half-read: `finish` sees an incomplete body and closes the connection.
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(wire: &str, head_only: bool) -> Result<Option<Head>, WireError> {
        parse_head(&mut BytesMut::from(wire), head_only)
    }

    fn framing_of(wire: &str) -> (String, bool) {
        let h = head(wire, false).unwrap().unwrap();
        (format!("{:?}", h.framing), h.keep_alive)
    }

    #[test]
    fn request_head_is_origin_form_with_host_added_when_missing() {
        // (request, head sent upstream)
        for (req, want) in [
            (
                http::Request::get("http://example.test/a/b?q=1").header("accept", "*/*"),
                "GET /a/b?q=1 HTTP/1.1\r\nhost: up:8080\r\naccept: */*\r\n\r\n",
            ),
            (
                http::Request::head("/x").header("host", "client.test"),
                "HEAD /x HTTP/1.1\r\nhost: client.test\r\n\r\n",
            ),
        ] {
            let (parts, ()) = req.body(()).unwrap().into_parts();
            let mut out = Vec::new();
            encode_head(&parts, Some(&HeaderValue::from_static("up:8080")), &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), want);
        }
    }

    #[test]
    fn response_head_keeps_fields_in_order_and_leaves_the_body() {
        let mut buf =
            BytesMut::from("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello");
        let h = parse_head(&mut buf, false).unwrap().unwrap();
        assert_eq!(h.response.status, StatusCode::OK);
        let xa: Vec<_> = h.response.headers.get_all("x-a").iter().collect();
        assert_eq!(xa, ["1", "2"]);
        assert_eq!(&buf[..], b"hello");
        assert!(matches!(h.framing, Some(Framing::Length(5))));
        assert!(h.keep_alive);
    }

    #[test]
    fn partial_heads_wait_and_interim_responses_are_skipped() {
        assert!(head("HTTP/1.1 200 OK\r\nContent-Len", false)
            .unwrap()
            .is_none());
        let h = head(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.response.status, StatusCode::NOT_FOUND);
        assert!(h.response.headers.get("link").is_none());
    }

    #[test]
    fn framing_follows_rfc_9112() {
        // (response head, framing, connection reusable afterwards)
        for (wire, framing, keep) in [
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
                "Some(Chunked",
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
                "Some(Chunked",
                true,
            ),
            // Not chunked last: read until close, never reused.
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
                "Some(UntilClose)",
                false,
            ),
            // No length at all: until close.
            ("HTTP/1.1 200 OK\r\n\r\n", "Some(UntilClose)", false),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 7, 7\r\n\r\n",
                "Some(Length(7))",
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 7\r\n\r\n",
                "Some(Length(7))",
                false,
            ),
            (
                "HTTP/1.0 200 OK\r\ncontent-length: 7\r\n\r\n",
                "Some(Length(7))",
                false,
            ),
            (
                "HTTP/1.1 204 No Content\r\ncontent-length: 9\r\n\r\n",
                "None",
                true,
            ),
            (
                "HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n",
                "None",
                true,
            ),
        ] {
            let (got, reusable) = framing_of(wire);
            assert!(got.starts_with(framing), "{wire:?}: {got}");
            assert_eq!(reusable, keep, "{wire:?}");
        }
        let h = head("HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n", true)
            .unwrap()
            .unwrap();
        assert!(h.framing.is_none(), "HEAD responses have no body");
        // Both: chunked wins, Content-Length is dropped, the connection is not reused.
        let h = head(
            "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(h.response.headers.get(CONTENT_LENGTH).is_none());
        assert!(!h.keep_alive);
    }

    #[test]
    fn malformed_heads_are_errors_not_panics() {
        for wire in [
            "HTTP/1.1 200 OK\r\ncontent-length: 3, 4\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: +5\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 5\u{a0}\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "NOT HTTP\r\n\r\n",
            "HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
        ] {
            assert!(head(wire, false).is_err(), "{wire:?}");
        }
    }
}
