//! The own loop's forwarding: the head goes upstream on the direct path, the upstream's response
//! head is rewritten straight into the client's (hop-by-hop fields and the fields its
//! `Connection` names dropped, the rate-limit fields replacing the upstream's, `Date` added when
//! missing, chunked framing when the length is unknown), and the body is pumped through.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use bytes::{Buf, Bytes, BytesMut};
use hyper::body::Body;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::edge::h1::framing::{body_framing, lists_token, with_final_head, Framing};
use crate::edge::h1::hop::is_hop_by_hop_name;
use crate::edge::h1::write::{finish_head, push_field, write_answer};
use crate::edge::render::response::{is_rate_limit_field, write_header_lines};
use crate::model::Decision;
use crate::proxy::hyper::upstream_failure;
use crate::proxy::upstream::client::Upstream;
use crate::proxy::upstream::direct::DirectBody;

/// Output gathered before it is written even though more body is at hand.
const FLUSH_AT: usize = 64 * 1024;

/// What [`forward`] sent the client.
pub(crate) struct Sent {
    /// Whether the client connection may carry another request.
    pub(crate) kept: bool,
    pub(crate) status: u16,
    /// Response body bytes (the access log's `bytes`).
    pub(crate) bytes: u64,
}

/// Sends `up` on the direct path and streams the answer to the client.
pub(crate) async fn forward(
    upstream: &Arc<Upstream>,
    stream: &mut TcpStream,
    up: &[u8],
    decision: &Decision,
    head_only: bool,
    close: bool,
    out: &mut Vec<u8>,
) -> Sent {
    let exchanged = upstream
        .exchange_direct(up, |ubuf| {
            response_head(ubuf, head_only, decision, close, &mut *out)
        })
        .await;
    let ((framing, keep_alive), conn) = match exchanged {
        Ok(pair) => pair,
        Err(err) => {
            out.clear();
            let resp = upstream_failure(err, decision);
            write_answer(out, &resp, head_only, close);
            return Sent {
                kept: stream.write_all(out).await.is_ok(),
                status: resp.status().as_u16(),
                bytes: if head_only {
                    0
                } else {
                    resp.body().len() as u64
                },
            };
        }
    };
    // `out` holds the client's head: `HTTP/1.1 NNN …`.
    let status = out
        .get(9..12)
        .and_then(|d| std::str::from_utf8(d).ok()?.parse().ok())
        .unwrap_or(0);
    let rechunk = matches!(framing, Some(Framing::Chunked(_) | Framing::UntilClose));
    let body = DirectBody::new(conn, framing, keep_alive, upstream);
    let (kept, bytes) = pump(stream, body, rechunk, out).await;
    Sent {
        kept,
        status,
        bytes,
    }
}

/// Takes the upstream's final response head off `ubuf` and writes the client's response head
/// into `out`; returns the body framing and, with the connection, whether it stays reusable.
pub(crate) fn response_head(
    ubuf: &mut BytesMut,
    head_only: bool,
    decision: &Decision,
    close: bool,
    out: &mut Vec<u8>,
) -> Result<Option<(Option<Framing>, bool)>, crate::edge::h1::framing::WireError> {
    let Some((framing, len)) = with_final_head(ubuf, |parsed| {
        let code = parsed.code.unwrap_or(0);
        let body = body_framing(code, parsed.version, parsed.headers, head_only)?;
        out.clear();
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(itoa::Buffer::new().format(code).as_bytes());
        out.push(b' ');
        out.extend_from_slice(parsed.reason.unwrap_or("").as_bytes());
        out.extend_from_slice(b"\r\n");
        let is_connection = |h: &&httparse::Header<'_>| h.name.eq_ignore_ascii_case("connection");
        // Fields the upstream's `Connection` names are hop-by-hop too (rare: most name none).
        let names_fields = parsed.headers.iter().filter(is_connection).any(|c| {
            c.value.split(|&b| b == b',').any(|t| {
                let t = t.trim_ascii();
                !t.is_empty()
                    && !t.eq_ignore_ascii_case(b"close")
                    && !t.eq_ignore_ascii_case(b"keep-alive")
            })
        });
        let mut has_date = false;
        for h in parsed.headers.iter() {
            let name = h.name.as_bytes();
            let skip = is_hop_by_hop_name(name)
                || is_rate_limit_field(name)
                || (body.drop_content_length && h.name.eq_ignore_ascii_case("content-length"))
                || (names_fields
                    && parsed
                        .headers
                        .iter()
                        .filter(is_connection)
                        .any(|c| lists_token(c.value, h.name)));
            if !skip {
                has_date |= h.name.eq_ignore_ascii_case("date");
                push_field(out, name, h.value);
            }
        }
        write_header_lines(decision, out);
        if matches!(
            body.framing,
            Some(Framing::Chunked(_) | Framing::UntilClose)
        ) {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        }
        finish_head(out, !has_date, close);
        Ok((body.framing, body.keep_alive))
    })?
    else {
        return Ok(None);
    };
    ubuf.advance(len);
    Ok(Some(framing))
}

/// What the body offers next.
enum Pumped {
    Frame(Option<Result<hyper::body::Frame<Bytes>, io::Error>>),
    /// Nothing is at hand: write what was gathered before waiting.
    Flush,
}

/// Streams `body` after the head in `out`, re-chunked when the upstream's length is unknown;
/// whether the client connection may carry another request, and the body bytes passed on.
pub(crate) async fn pump(
    stream: &mut TcpStream,
    mut body: DirectBody,
    rechunk: bool,
    out: &mut Vec<u8>,
) -> (bool, u64) {
    let mut bytes = 0u64;
    loop {
        let next = std::future::poll_fn(|cx| match Pin::new(&mut body).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(Pumped::Frame(frame)),
            Poll::Pending if !out.is_empty() => Poll::Ready(Pumped::Flush),
            Poll::Pending => Poll::Pending,
        })
        .await;
        match next {
            Pumped::Flush => {}
            Pumped::Frame(None) => {
                if rechunk {
                    out.extend_from_slice(b"0\r\n\r\n");
                }
                let sent = stream.write_all(out).await.is_ok();
                out.clear();
                return (sent, bytes);
            }
            Pumped::Frame(Some(Ok(frame))) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                bytes += data.len() as u64;
                if rechunk {
                    if data.is_empty() {
                        continue;
                    }
                    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                    out.extend_from_slice(&data);
                    out.extend_from_slice(b"\r\n");
                } else {
                    out.extend_from_slice(&data);
                }
                if out.len() < FLUSH_AT {
                    continue;
                }
            }
            Pumped::Frame(Some(Err(err))) => {
                // The client gets what arrived, then a close inside the body: its framing
                // tells it the response is cut short.
                tracing::warn!(error = %err, "upstream body broke off");
                let _ = stream.write_all(out).await;
                out.clear();
                return (false, bytes);
            }
        }
        if stream.write_all(out).await.is_err() {
            return (false, bytes);
        }
        out.clear();
    }
}
