//! The direct path to the upstream, taken by most proxied traffic: a request without a body
//! whose method is safe to repeat (GET, HEAD, OPTIONS) is written, and its response head read, by
//! the request's own task on a pooled plain TCP connection; [`DirectBody`] then reads the body as
//! the server polls it. Requests with a body go through hyper's client ([`super::upstream`]),
//! which sends the body while it reads the answer.
//!
//! Why a second path: hyper's connection-level client drives every connection from a task of its
//! own and passes each request, response and body chunk over channels. On the small responses
//! crawlers fetch, that machinery was about a fifth of the proxy's CPU per request (profile and
//! figures in docs/http.md). Here nothing is spawned and nothing crosses a channel.
//!
//! Framing follows RFC 9112 §6.3: no body after HEAD, 1xx, 204 and 304; chunked (decoded by
//! [`super::chunked`]) when the last transfer coding is chunked; else Content-Length; else until
//! the upstream closes. A connection is reused only after an HTTP/1.1 response without
//! `Connection: close` was read to its end with nothing left over.
//!
//! An idle pooled connection the upstream has closed shows up as a failed write or as an empty
//! read before any response byte; the request then goes out once more on a fresh connection,
//! which is safe because only idempotent methods without a body take this path.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::{request, HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode, Version};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::chunked::{Chunked, Step};
use super::upstream::{Upstream, UpstreamError};

/// Response head fields accepted from the upstream (hyper's client default is 100).
const MAX_HEADERS: usize = 100;
/// Largest response head accepted from the upstream.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Fields the proxy adds to a response (`super::response::write_headers` writes at most 9).
const RESPONSE_FIELDS_ADDED: usize = 10;
/// Read-buffer growth per read.
const READ_SIZE: usize = 16 * 1024;

/// A pooled upstream connection and whatever it has read past the last exchange.
pub(super) struct DirectConn {
    stream: TcpStream,
    buf: BytesMut,
    pub(super) since: Instant,
}

impl DirectConn {
    pub(super) fn new(stream: TcpStream) -> Self {
        DirectConn {
            stream,
            buf: BytesMut::with_capacity(READ_SIZE),
            since: Instant::now(),
        }
    }
}

/// Whether `req` may take the direct path.
pub(super) fn eligible(req: &http::Request<Incoming>) -> bool {
    matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        && req.body().is_end_stream()
}

/// Why an exchange on the direct path failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum DirectError {
    #[error("writing the request failed")]
    Write(#[source] io::Error),
    #[error("reading the response failed")]
    Read {
        #[source]
        source: io::Error,
        got_bytes: bool,
    },
    #[error("the upstream closed the connection {}", if *.got_bytes { "inside the response head" } else { "without answering" })]
    Closed { got_bytes: bool },
    #[error("malformed response head: {0}")]
    Malformed(String),
    #[error("response head over {MAX_HEAD_BYTES} bytes")]
    HeadTooLarge,
}

impl DirectError {
    /// A failure that means "this pooled connection was already dead": nothing was answered.
    fn is_stale(&self) -> bool {
        matches!(
            self,
            DirectError::Write(_)
                | DirectError::Read {
                    got_bytes: false,
                    ..
                }
                | DirectError::Closed { got_bytes: false }
        )
    }
}

/// How the body after a response head is delimited.
#[derive(Debug)]
enum Framing {
    Length(u64),
    Chunked(Chunked),
    UntilClose,
}

impl Framing {
    fn is_complete(&self) -> bool {
        match self {
            Framing::Length(left) => *left == 0,
            Framing::Chunked(c) => c.is_done(),
            Framing::UntilClose => false,
        }
    }
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
fn parse_head(buf: &mut BytesMut, head_only: bool) -> Result<Option<Head>, DirectError> {
    loop {
        // Left uninitialised: httparse initialises what it fills, and zeroing 100 slots for
        // the usual eight fields showed in the profile.
        let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut parsed = httparse::Response::new(&mut []);
        let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut parsed,
            buf,
            &mut fields,
        ) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => return Err(DirectError::Malformed(e.to_string())),
        };
        let code = parsed.code.unwrap_or(0);
        if (100..200).contains(&code) {
            if code == 101 {
                return Err(DirectError::Malformed(
                    "101 Switching Protocols to a request that asked for no upgrade".into(),
                ));
            }
            buf.advance(len);
            continue;
        }
        let status = StatusCode::from_u16(code)
            .map_err(|_| DirectError::Malformed(format!("status code {code}")))?;
        let version = if parsed.version == Some(0) {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        };
        // Offsets into the head, so values can be zero-copy slices of it once it is frozen.
        let base = buf.as_ptr() as usize;
        let mut spans = [(0usize, 0usize, 0usize, 0usize); MAX_HEADERS];
        let count = parsed.headers.len();
        for (span, f) in spans.iter_mut().zip(parsed.headers.iter()) {
            *span = (
                f.name.as_ptr() as usize - base,
                f.name.len(),
                f.value.as_ptr() as usize - base,
                f.value.len(),
            );
        }
        let head = buf.split_to(len).freeze();
        // Room for the rate-limit fields the proxy adds, so adding them never regrows the map.
        let mut headers = HeaderMap::with_capacity(count + RESPONSE_FIELDS_ADDED);
        let mut present = Present::default();
        for &(n, nl, v, vl) in &spans[..count] {
            let name = HeaderName::from_bytes(&head[n..n + nl])
                .map_err(|_| DirectError::Malformed("invalid header name".into()))?;
            let value = HeaderValue::from_maybe_shared(head.slice(v..v + vl))
                .map_err(|_| DirectError::Malformed(format!("invalid value for {name}")))?;
            present.note(&name);
            headers.append(name, value);
        }
        let (framing, keep_alive) = framing(status, version, &mut headers, present, head_only)?;
        let mut response = Response::new(()).into_parts().0;
        response.status = status;
        response.version = version;
        response.headers = headers;
        return Ok(Some(Head {
            response,
            framing,
            keep_alive,
        }));
    }
}

/// Which framing fields a head has, noted while it is parsed, so the map is only searched for
/// fields that are there.
#[derive(Clone, Copy, Default)]
struct Present {
    connection: bool,
    transfer_encoding: bool,
}

impl Present {
    fn note(&mut self, name: &HeaderName) {
        if name == CONNECTION {
            self.connection = true;
        } else if name == TRANSFER_ENCODING {
            self.transfer_encoding = true;
        }
    }
}

/// The body framing (`None`: no body) and whether the connection may be reused afterwards.
fn framing(
    status: StatusCode,
    version: Version,
    headers: &mut HeaderMap,
    present: Present,
    head_only: bool,
) -> Result<(Option<Framing>, bool), DirectError> {
    let close = present.connection
        && headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("close"));
    let mut keep_alive = version == Version::HTTP_11 && !close;
    if head_only || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok((None, keep_alive));
    }
    let te = if present.transfer_encoding {
        headers.get_all(TRANSFER_ENCODING).iter().next_back()
    } else {
        None
    };
    if let Some(te) = te {
        let chunked = te
            .to_str()
            .ok()
            .and_then(|s| s.rsplit(',').next())
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"));
        // A Content-Length beside Transfer-Encoding is wrong or an attack: it is dropped, and
        // the connection not trusted with another request (RFC 9112 §6.3).
        if headers.remove(CONTENT_LENGTH).is_some() {
            keep_alive = false;
        }
        return Ok(if chunked {
            (Some(Framing::Chunked(Chunked::default())), keep_alive)
        } else {
            (Some(Framing::UntilClose), false)
        });
    }
    let mut length = None;
    for v in headers.get_all(CONTENT_LENGTH) {
        let text = v
            .to_str()
            .map_err(|_| DirectError::Malformed("Content-Length".into()))?;
        for part in text.split(',') {
            let n: u64 = part
                .trim()
                .parse()
                .map_err(|_| DirectError::Malformed(format!("Content-Length {text:?}")))?;
            if length.is_some_and(|l| l != n) {
                return Err(DirectError::Malformed(
                    "conflicting Content-Length values".into(),
                ));
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(n) => (Some(Framing::Length(n)), keep_alive),
        None => (Some(Framing::UntilClose), false),
    })
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

/// Writes `head` on `conn` and reads the response head.
async fn exchange(
    conn: &mut DirectConn,
    head: &[u8],
    head_only: bool,
) -> Result<Head, DirectError> {
    conn.stream
        .write_all(head)
        .await
        .map_err(DirectError::Write)?;
    loop {
        if !conn.buf.is_empty() {
            if let Some(head) = parse_head(&mut conn.buf, head_only)? {
                return Ok(head);
            }
            if conn.buf.len() >= MAX_HEAD_BYTES {
                return Err(DirectError::HeadTooLarge);
            }
        }
        conn.buf.reserve(READ_SIZE);
        let got_bytes = !conn.buf.is_empty();
        let n = std::future::poll_fn(|cx| poll_read_buf(&mut conn.stream, cx, &mut conn.buf))
            .await
            .map_err(|source| DirectError::Read { source, got_bytes })?;
        if n == 0 {
            return Err(DirectError::Closed { got_bytes });
        }
    }
}

impl Upstream {
    /// Sends a bodyless idempotent request on the direct path; see the module docs.
    pub(super) async fn send_direct(
        self: &Arc<Self>,
        parts: request::Parts,
    ) -> Result<Response<DirectBody>, UpstreamError> {
        let head_only = parts.method == Method::HEAD;
        let mut head = Vec::with_capacity(256 + parts.headers.len() * 32);
        encode_head(&parts, self.host_header(), &mut head);
        let attempt = async {
            let (mut conn, pooled) = match self.checkout_direct() {
                Some(conn) => (conn, true),
                // Boxed: connecting is rare, and its future is large.
                None => (Box::pin(self.connect_direct()).await?, false),
            };
            match exchange(&mut conn, &head, head_only).await {
                Ok(h) => Ok((h, conn)),
                Err(e) if pooled && e.is_stale() => {
                    let mut conn = Box::pin(self.connect_direct()).await?;
                    match exchange(&mut conn, &head, head_only).await {
                        Ok(h) => Ok((h, conn)),
                        Err(e) => Err(self.failed(Box::new(e))),
                    }
                }
                Err(e) => Err(self.failed(Box::new(e))),
            }
        };
        let (head, conn) = self.within_response_timeout(attempt).await?;
        let mut body = DirectBody {
            conn: Some(conn),
            framing: head.framing,
            keep_alive: head.keep_alive,
            pool: Arc::clone(self),
        };
        if body.is_end_stream() {
            body.finish();
        }
        Ok(Response::from_parts(head.response, body))
    }

    async fn connect_direct(&self) -> Result<DirectConn, UpstreamError> {
        Ok(DirectConn::new(self.connect_stream().await?))
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

    fn head(wire: &str, head_only: bool) -> Result<Option<Head>, DirectError> {
        parse_head(&mut BytesMut::from(wire), head_only)
    }

    fn framing_of(wire: &str) -> (String, bool) {
        let h = head(wire, false).unwrap().unwrap();
        (format!("{:?}", h.framing), h.keep_alive)
    }

    #[test]
    fn request_head_is_origin_form_with_host_added_when_missing() {
        let req = http::Request::get("http://example.test/a/b?q=1")
            .header("accept", "*/*")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let mut out = Vec::new();
        encode_head(&parts, Some(&HeaderValue::from_static("up:8080")), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /a/b?q=1 HTTP/1.1\r\nhost: up:8080\r\naccept: */*\r\n\r\n"
        );
        let req = http::Request::head("/x")
            .header("host", "client.test")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let mut out = Vec::new();
        encode_head(&parts, Some(&HeaderValue::from_static("up:8080")), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HEAD /x HTTP/1.1\r\nhost: client.test\r\n\r\n"
        );
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
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "NOT HTTP\r\n\r\n",
            "HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
        ] {
            assert!(head(wire, false).is_err(), "{wire:?}");
        }
    }
}
