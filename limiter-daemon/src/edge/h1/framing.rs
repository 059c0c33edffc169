//! The upstream's response head on the wire, one implementation for both of the proxy's
//! loops: the final head after any interim 1xx responses, and how its body is delimited
//! (RFC 9112 §6.3: no body after HEAD, 204 and 304; chunked when the last transfer coding is
//! chunked; else `Content-Length`; else until the upstream closes), with the failures of an
//! exchange on bytes.

use std::io;
use std::mem::MaybeUninit;

use bytes::{Buf, BytesMut};
use http::StatusCode;

use crate::edge::h1::chunked::Chunked;

/// Response head fields accepted from the upstream (hyper's client default is 100).
pub(crate) const MAX_HEADERS: usize = 100;
/// Largest response head accepted from the upstream.
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Why an exchange on the direct path failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
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

impl WireError {
    /// A failure that means "this pooled connection was already dead": nothing was answered.
    pub(crate) fn is_stale(&self) -> bool {
        matches!(
            self,
            WireError::Write(_)
                | WireError::Read {
                    got_bytes: false,
                    ..
                }
                | WireError::Closed { got_bytes: false }
        )
    }
}

/// How the body after a response head is delimited.
#[derive(Debug)]
pub(crate) enum Framing {
    Length(u64),
    Chunked(Chunked),
    UntilClose,
}

impl Framing {
    pub(crate) fn is_complete(&self) -> bool {
        match self {
            Framing::Length(left) => *left == 0,
            Framing::Chunked(c) => c.is_done(),
            Framing::UntilClose => false,
        }
    }
}

/// What the framing fields of a final response head say.
#[derive(Debug)]
pub(crate) struct BodyFraming {
    /// `None`: no body.
    pub(crate) framing: Option<Framing>,
    /// Whether the connection may carry another exchange after this body.
    pub(crate) keep_alive: bool,
    /// `Content-Length` came beside `Transfer-Encoding`: it must not be passed on.
    pub(crate) drop_content_length: bool,
}

/// Runs `f` on the final response head at the front of `buf`, skipping (and consuming) interim
/// 1xx responses before it; returns `f`'s result and the head's length, leaving the head in
/// `buf` for the caller to take. `None` when more bytes are needed.
pub(crate) fn with_final_head<T>(
    buf: &mut BytesMut,
    mut f: impl FnMut(&httparse::Response<'_, '_>) -> Result<T, WireError>,
) -> Result<Option<(T, usize)>, WireError> {
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
            Err(e) => return Err(WireError::Malformed(e.to_string())),
        };
        let code = parsed.code.unwrap_or(0);
        if (100..200).contains(&code) {
            if code == 101 {
                return Err(WireError::Malformed(
                    "101 Switching Protocols to a request that asked for no upgrade".into(),
                ));
            }
            buf.advance(len);
            continue;
        }
        if StatusCode::from_u16(code).is_err() {
            return Err(WireError::Malformed(format!("status code {code}")));
        }
        return Ok(Some((f(&parsed)?, len)));
    }
}

/// Whether a comma-separated field value lists `token` (case-insensitively).
pub(crate) fn lists_token(value: &[u8], token: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// The body framing of a final response head with status `code` (RFC 9112 §6.3).
pub(crate) fn body_framing(
    code: u16,
    version: Option<u8>,
    headers: &[httparse::Header<'_>],
    head_only: bool,
) -> Result<BodyFraming, WireError> {
    fn named<'h, 'b>(
        headers: &'h [httparse::Header<'b>],
        name: &'static str,
    ) -> impl DoubleEndedIterator<Item = &'h httparse::Header<'b>> {
        headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
    }
    let close = named(headers, "connection").any(|h| lists_token(h.value, "close"));
    let mut keep_alive = version == Some(1) && !close;
    let framed = |framing, keep_alive, drop_content_length| BodyFraming {
        framing,
        keep_alive,
        drop_content_length,
    };
    if head_only || code == 204 || code == 304 {
        return Ok(framed(None, keep_alive, false));
    }
    if let Some(te) = named(headers, "transfer-encoding").last() {
        let chunked = te
            .value
            .rsplit(|&b| b == b',')
            .next()
            .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        // A Content-Length beside Transfer-Encoding is wrong or an attack: it is dropped, and
        // the connection not trusted with another request (RFC 9112 §6.3).
        let with_length = named(headers, "content-length").next().is_some();
        if with_length {
            keep_alive = false;
        }
        return Ok(if chunked {
            framed(
                Some(Framing::Chunked(Chunked::default())),
                keep_alive,
                with_length,
            )
        } else {
            framed(Some(Framing::UntilClose), false, with_length)
        });
    }
    let mut length = None;
    for h in named(headers, "content-length") {
        let text = std::str::from_utf8(h.value)
            .map_err(|_| WireError::Malformed("Content-Length".into()))?;
        for part in text.split(',') {
            // `1*DIGIT` between optional whitespace (RFC 9110 §8.6): `u64::from_str` alone
            // would take `+5`, and `str::trim` Unicode spaces, which then reach the client.
            let digits = part.trim_matches([' ', '\t']);
            let n = match digits.parse::<u64>() {
                Ok(n) if digits.bytes().all(|b| b.is_ascii_digit()) => n,
                _ => return Err(WireError::Malformed(format!("Content-Length {text:?}"))),
            };
            if length.is_some_and(|l| l != n) {
                return Err(WireError::Malformed(
                    "conflicting Content-Length values".into(),
                ));
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(n) => framed(Some(Framing::Length(n)), keep_alive, false),
        None => framed(Some(Framing::UntilClose), false, false),
    })
}
