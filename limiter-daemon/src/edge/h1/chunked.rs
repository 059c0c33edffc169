//! Decoder for the chunked transfer coding (RFC 9112 §7.1) of upstream responses read on the
//! direct path ([`crate::proxy::upstream::direct`]). Fed the connection's read buffer, it hands out the
//! chunk data zero-copy and consumes the framing. Chunk extensions and trailer fields are read
//! and dropped: both belong to this hop, and the client gets the body re-framed by the server.

use bytes::{Bytes, BytesMut};

/// Longest chunk-size line (size, extensions and CRLF) or trailer section accepted: enough for
/// any real extension, small enough that a hostile upstream cannot make the proxy buffer much.
const MAX_LINE: usize = 4096;
const MAX_TRAILERS: usize = 16 * 1024;

/// What one call to [`Chunked::decode`] produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Body bytes, split off the front of the buffer.
    Data(Bytes),
    /// The buffer is used up; read more and call again.
    NeedMore,
    /// The last chunk and the trailer section have been consumed.
    Done,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    #[error("invalid chunk size line")]
    Size,
    #[error("chunk data not followed by CRLF")]
    MissingCrlf,
    #[error("chunk size line or trailer section over the limit")]
    TooLong,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// In a chunk-size line: `size` so far, `digits` read, past the digits (in extensions or
    /// whitespace), bytes of the line so far.
    Size {
        size: u64,
        digits: u32,
        past_digits: bool,
        len: usize,
    },
    Data(u64),
    /// After a chunk's data: expecting CRLF (`seen_cr` once the CR is in).
    DataEnd {
        seen_cr: bool,
    },
    /// In the trailer section: bytes of the current line, bytes of the section.
    Trailers {
        line: usize,
        total: usize,
    },
    Done,
}

const SIZE_START: State = State::Size {
    size: 0,
    digits: 0,
    past_digits: false,
    len: 0,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunked {
    state: State,
}

impl Default for Chunked {
    fn default() -> Self {
        Chunked { state: SIZE_START }
    }
}

impl Chunked {
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes framing from the front of `buf` until body bytes, the end, or the end of `buf`.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Step, ChunkError> {
        loop {
            match self.state {
                State::Done => return Ok(Step::Done),
                State::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Step::NeedMore);
                    }
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    let rest = left - take as u64;
                    self.state = if rest == 0 {
                        State::DataEnd { seen_cr: false }
                    } else {
                        State::Data(rest)
                    };
                    return Ok(Step::Data(buf.split_to(take).freeze()));
                }
                _ => {
                    let Some(&b) = buf.first() else {
                        return Ok(Step::NeedMore);
                    };
                    bytes::Buf::advance(buf, 1);
                    self.state = self.framing_byte(b)?;
                }
            }
        }
    }

    /// The state after one framing byte (anything but data).
    fn framing_byte(&self, b: u8) -> Result<State, ChunkError> {
        Ok(match self.state {
            State::Size {
                size,
                digits,
                past_digits,
                len,
            } => {
                if len >= MAX_LINE {
                    return Err(ChunkError::TooLong);
                }
                let len = len + 1;
                match b {
                    b'\n' if digits == 0 => return Err(ChunkError::Size),
                    b'\n' if size == 0 => State::Trailers { line: 0, total: 0 },
                    b'\n' => State::Data(size),
                    b'\r' => State::Size {
                        size,
                        digits,
                        past_digits: true,
                        len,
                    },
                    _ if !past_digits && b.is_ascii_hexdigit() => {
                        // 15 hex digits keep the size far below u64::MAX.
                        if digits >= 15 {
                            return Err(ChunkError::Size);
                        }
                        let v = u64::from(hex_value(b));
                        State::Size {
                            size: size * 16 + v,
                            digits: digits + 1,
                            past_digits,
                            len,
                        }
                    }
                    // Extensions (`;name=value`) and whitespace before them are skipped.
                    b';' | b' ' | b'\t' if digits > 0 => State::Size {
                        size,
                        digits,
                        past_digits: true,
                        len,
                    },
                    _ if past_digits && b != b'\r' => State::Size {
                        size,
                        digits,
                        past_digits,
                        len,
                    },
                    _ => return Err(ChunkError::Size),
                }
            }
            State::DataEnd { seen_cr } => match b {
                b'\r' if !seen_cr => State::DataEnd { seen_cr: true },
                b'\n' => SIZE_START,
                _ => return Err(ChunkError::MissingCrlf),
            },
            State::Trailers { line, total } => {
                if total >= MAX_TRAILERS {
                    return Err(ChunkError::TooLong);
                }
                match b {
                    b'\n' if line == 0 => State::Done,
                    b'\n' => State::Trailers {
                        line: 0,
                        total: total + 1,
                    },
                    b'\r' => State::Trailers {
                        line,
                        total: total + 1,
                    },
                    _ => State::Trailers {
                        line: line + 1,
                        total: total + 1,
                    },
                }
            }
            State::Data(_) | State::Done => self.state,
        })
    }
}

fn hex_value(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `wire` fed in pieces of `step` bytes; the body and whether the end was seen.
    fn decode_in_steps(wire: &[u8], step: usize) -> Result<(Vec<u8>, bool, usize), ChunkError> {
        let mut d = Chunked::default();
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        for piece in wire.chunks(step) {
            buf.extend_from_slice(piece);
            loop {
                match d.decode(&mut buf)? {
                    Step::Data(b) => body.extend_from_slice(&b),
                    Step::NeedMore => break,
                    Step::Done => return Ok((body, true, buf.len())),
                }
            }
        }
        Ok((body, false, buf.len()))
    }

    #[test]
    fn decodes_chunks_extensions_and_trailers_whatever_the_read_sizes() {
        let wire =
            b"5\r\nhello\r\n1A;name=\"v\"\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nx-sum: 1\r\n\r\n";
        for step in 1..=wire.len() {
            let (body, done, left) = decode_in_steps(wire, step).unwrap();
            assert_eq!(body, b"helloabcdefghijklmnopqrstuvwxyz", "step {step}");
            assert!(done, "step {step}");
            assert_eq!(left, 0, "step {step}");
        }
    }

    #[test]
    fn stops_at_the_end_and_leaves_what_follows() {
        let (body, done, left) = decode_in_steps(b"3\r\nabc\r\n0\r\n\r\nHTTP/1.1", 64).unwrap();
        assert_eq!(body, b"abc");
        assert!(done);
        assert_eq!(left, "HTTP/1.1".len());
    }

    #[test]
    fn uppercase_hex_and_bare_lf_are_accepted() {
        let (body, done, _) = decode_in_steps(b"A\nabcdefghij\n0\n\n", 3).unwrap();
        assert_eq!(body, b"abcdefghij");
        assert!(done);
    }

    #[test]
    fn an_unfinished_body_is_not_done() {
        let (body, done, _) = decode_in_steps(b"5\r\nhel", 2).unwrap();
        assert_eq!(body, b"hel");
        assert!(!done);
    }

    #[test]
    fn malformed_framing_is_an_error() {
        for (wire, err) in [
            (&b"zz\r\n"[..], ChunkError::Size),
            (b"\r\n", ChunkError::Size),
            (b";ext\r\n", ChunkError::Size),
            (b"1234567890abcdef0\r\n", ChunkError::Size),
            (b"3\r\nabcX", ChunkError::MissingCrlf),
            (b"3\r\nabc\rX", ChunkError::MissingCrlf),
        ] {
            assert_eq!(decode_in_steps(wire, 1).unwrap_err(), err, "{wire:?}");
        }
        let long = [b"1;".as_slice(), &[b'x'; MAX_LINE]].concat();
        assert_eq!(
            decode_in_steps(&long, 100).unwrap_err(),
            ChunkError::TooLong
        );
        let trailers = [b"0\r\n".as_slice(), &b"x: y\r\n".repeat(MAX_TRAILERS)].concat();
        assert_eq!(
            decode_in_steps(&trailers, 1000).unwrap_err(),
            ChunkError::TooLong
        );
    }
}
