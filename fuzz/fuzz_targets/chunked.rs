//! The chunked decoder (`Chunked::decode`) fed in arbitrary splits.
//!
//! Input: two bytes that choose the split sizes, then
//! - when the first byte is even, the wire itself: decoded whole and in pieces, both must give
//!   the same body, the same outcome (done, error, or more needed) at the same byte, and never
//!   an empty data step;
//! - when it is odd, a structured body (chunks, sizes with case and leading zeros, extensions,
//!   bare-LF line ends, trailers, bytes after the end) encoded here: decoding it in pieces must
//!   give back exactly the chunks, end, and leave exactly the bytes after the end.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use limiter_daemon::edge::h1::chunked::{ChunkError, Chunked, Step};

#[derive(Debug, PartialEq, Eq)]
enum End {
    Done,
    NeedMore,
    Failed(ChunkError),
}

#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    body: Vec<u8>,
    end: End,
    /// Wire bytes consumed when it ended (all of them for `NeedMore`).
    consumed: usize,
}

/// Split sizes from a small xorshift: 1 to `max` bytes each; `max == 0`: all at once.
struct Splits {
    state: u32,
    max: usize,
}

impl Splits {
    fn next(&mut self) -> usize {
        if self.max == 0 {
            return usize::MAX;
        }
        self.state ^= self.state << 13;
        self.state ^= self.state >> 17;
        self.state ^= self.state << 5;
        1 + self.state as usize % self.max
    }
}

fn decode(wire: &[u8], mut splits: Splits) -> Outcome {
    let mut d = Chunked::default();
    let mut buf = BytesMut::new();
    let mut body = Vec::new();
    let mut fed = 0;
    loop {
        let step = d.decode(&mut buf);
        match step {
            Ok(Step::Data(b)) => {
                assert!(!b.is_empty(), "an empty data step");
                body.extend_from_slice(&b);
            }
            Ok(Step::Done) => {
                assert!(d.is_done());
                // Done is sticky and consumes nothing more.
                let left = buf.len();
                assert_eq!(d.decode(&mut buf), Ok(Step::Done));
                assert_eq!(buf.len(), left);
                return Outcome {
                    body,
                    end: End::Done,
                    consumed: fed - left,
                };
            }
            Ok(Step::NeedMore) => {
                assert!(buf.is_empty(), "more needed with bytes at hand");
                if fed == wire.len() {
                    return Outcome {
                        body,
                        end: End::NeedMore,
                        consumed: fed,
                    };
                }
                let n = splits.next().min(wire.len() - fed);
                buf.extend_from_slice(&wire[fed..fed + n]);
                fed += n;
            }
            Err(e) => {
                return Outcome {
                    body,
                    end: End::Failed(e),
                    consumed: fed - buf.len(),
                }
            }
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Chunk {
    data: Vec<u8>,
    upper_hex: bool,
    leading_zeros: u8,
    ext: Option<String>,
    bare_lf: bool,
}

#[derive(Arbitrary, Debug)]
struct Body {
    chunks: Vec<Chunk>,
    last_ext: Option<String>,
    trailers: Vec<(String, String)>,
    after: Vec<u8>,
}

fn line_end(out: &mut Vec<u8>, bare_lf: bool) {
    out.extend_from_slice(if bare_lf { b"\n" } else { b"\r\n" });
}

/// `text` without line ends, cut to `max` bytes.
fn one_line(text: &str, max: usize) -> Vec<u8> {
    text.bytes()
        .filter(|&b| b != b'\r' && b != b'\n')
        .take(max)
        .collect()
}

fn size_line(out: &mut Vec<u8>, size: usize, upper: bool, zeros: u8, ext: &Option<String>) {
    let hex = if upper {
        format!("{size:X}")
    } else {
        format!("{size:x}")
    };
    // At most 15 digits are accepted.
    let zeros = usize::from(zeros).min(15 - hex.len());
    out.extend(std::iter::repeat_n(b'0', zeros));
    out.extend_from_slice(hex.as_bytes());
    if let Some(ext) = ext {
        out.push(b';');
        out.extend(one_line(ext, 200));
    }
}

fn encode(body: &Body) -> (Vec<u8>, Vec<u8>, usize) {
    let mut wire = Vec::new();
    let mut data = Vec::new();
    for c in body.chunks.iter().filter(|c| !c.data.is_empty()) {
        size_line(
            &mut wire,
            c.data.len(),
            c.upper_hex,
            c.leading_zeros,
            &c.ext,
        );
        line_end(&mut wire, c.bare_lf);
        wire.extend_from_slice(&c.data);
        line_end(&mut wire, c.bare_lf);
        data.extend_from_slice(&c.data);
    }
    size_line(&mut wire, 0, false, 0, &body.last_ext);
    wire.extend_from_slice(b"\r\n");
    for (name, value) in body.trailers.iter().take(20) {
        let mut line = one_line(name, 40);
        line.extend_from_slice(b": ");
        line.extend(one_line(value, 200));
        wire.extend_from_slice(&line);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b"\r\n");
    let end = wire.len();
    wire.extend_from_slice(&body.after);
    (wire, data, end)
}

fuzz_target!(|data: &[u8]| {
    let [mode, split, rest @ ..] = data else {
        return;
    };
    let splits = || Splits {
        state: u32::from(*split) << 8 | u32::from(*mode) | 1,
        max: 1 + usize::from(*split % 64),
    };
    if mode % 2 == 0 {
        let whole = decode(rest, Splits { state: 1, max: 0 });
        let pieces = decode(rest, splits());
        assert_eq!(whole, pieces, "the split changed the outcome");
    } else {
        let Ok(body) = Body::arbitrary_take_rest(Unstructured::new(rest)) else {
            return;
        };
        let (wire, data, end) = encode(&body);
        let got = decode(&wire, splits());
        assert_eq!(
            got,
            Outcome {
                body: data,
                end: End::Done,
                consumed: end,
            },
            "{:?}",
            String::from_utf8_lossy(&wire)
        );
    }
});
