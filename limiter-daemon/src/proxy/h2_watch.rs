//! The frames an HTTP/2 client sends, followed in the bytes hyper reads (hyper tells nothing
//! of them): RST_STREAM frames are counted for metrics, header blocks (HEADERS and its
//! CONTINUATIONs) are timed ([`crate::proxy::h2_deadline`]), and the frames that cost
//! the server work without being a request are bounded per connection. [`abuse`] says when a
//! connection's end was abuse: these floods, or h2's own `ENHANCE_YOUR_CALM` limits (rapid
//! reset, CONTINUATION and DATA floods).
//!
//! Why the bound: h2 keeps their memory bounded (one acknowledgement queued; it stops reading
//! while that is unsent), not their number. A client may send PINGs, SETTINGS, their ACKs,
//! PRIORITY, WINDOW_UPDATE, GOAWAY, empty DATA or frames of unknown types forever, a CPU cost
//! with no request to meter (CVE-2019-9512, -9515, -9518: a million PING ACKs cost 2.3 s of
//! CPU). Each connection gets [`CONTROL_BURST`] such frames, refilled at [`CONTROL_PER_SEC`]:
//! far above what browsers and gRPC keep-alives send (a few SETTINGS at the start, a PING now
//! and then), far below a flood. Past it the read fails with [`Flood`] and hyper drops the
//! connection.
//!
//! WINDOW_UPDATE is what a downloading client owes: several per MB it reads (Go's client one
//! per 4 KiB per stream and one for the connection). So the bytes the server writes earn free
//! ones, one per [`BYTES_PER_UPDATE`] (up to [`CREDIT_CAP`] banked), and only those past that
//! take from the bound: a large download never runs out, a flood on an idle connection does.
//!
//! The watch turns off at the first byte that is not the preface's: HTTP/1.1 connections pay
//! one comparison per read and one addition per write.

use std::error::Error as StdError;
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use crate::proxy::h2::{H2Counters, PREFACE};
use crate::proxy::h2_deadline::Deadlines;

/// Frames that cost work without being a request a connection may send at once.
pub const CONTROL_BURST: f64 = 200.0;
/// Such frames per second a connection gets back after a burst.
pub const CONTROL_PER_SEC: f64 = 20.0;
/// Bytes written to the client that earn it one WINDOW_UPDATE outside the bound: 4 times what
/// the most eager client seen (Go's, 2 per 4 KiB) needs.
pub const BYTES_PER_UPDATE: u64 = 1024;
/// Most written bytes banked for WINDOW_UPDATEs still to come (a client is at most its window
/// behind; the largest browsers' connection windows are about this).
pub const CREDIT_CAP: u64 = 16 * 1024 * 1024;

/// Frame types (RFC 9113 §6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
/// The END_STREAM flag of DATA; END_HEADERS of HEADERS and CONTINUATION.
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// The client sent frames that are not requests faster than [`CONTROL_BURST`] and
/// [`CONTROL_PER_SEC`] allow.
#[derive(Debug, thiserror::Error)]
#[error(
    "HTTP/2 frame flood: PING, SETTINGS, PRIORITY, WINDOW_UPDATE, GOAWAY, empty DATA or \
     unknown frames past the connection's bound"
)]
pub struct Flood;

/// Follows one connection's frames (see the module docs).
#[derive(Debug)]
pub struct FrameWatch {
    matched: usize,
    head: [u8; 9],
    have: usize,
    skip: usize,
    off: bool,
    /// A header block is being read, and it ends with the frame being skipped.
    in_block: bool,
    block_ends: bool,
    /// Frames left, and when they were last refilled (`None`: none spent yet).
    tokens: f64,
    refilled: Option<Instant>,
    /// Bytes written to the client not yet spent on WINDOW_UPDATEs.
    credit: u64,
    /// Past the bound once: every later read fails too.
    flooded: bool,
}

impl Default for FrameWatch {
    fn default() -> Self {
        FrameWatch {
            matched: 0,
            head: [0; 9],
            have: 0,
            skip: 0,
            off: false,
            in_block: false,
            block_ends: false,
            tokens: CONTROL_BURST,
            refilled: None,
            credit: 0,
            flooded: false,
        }
    }
}

impl FrameWatch {
    /// Follows `data`, the next bytes read from the client.
    pub fn feed(
        &mut self,
        data: &[u8],
        counters: &H2Counters,
        deadlines: &Deadlines,
    ) -> Result<(), Flood> {
        self.feed_at(data, counters, deadlines, Instant::now)
    }

    /// `n` bytes were written to the client.
    pub fn wrote(&mut self, n: usize) {
        self.credit = (self.credit + n as u64).min(CREDIT_CAP);
    }

    /// [`Self::feed`] with the clock passed in; it is read only when a header block starts or
    /// a frame takes from the bound.
    fn feed_at(
        &mut self,
        mut data: &[u8],
        counters: &H2Counters,
        deadlines: &Deadlines,
        now: impl Fn() -> Instant,
    ) -> Result<(), Flood> {
        if self.flooded {
            return Err(Flood);
        }
        while !data.is_empty() && !self.off {
            if self.matched < PREFACE.len() {
                let n = (PREFACE.len() - self.matched).min(data.len());
                if data[..n] != PREFACE[self.matched..self.matched + n] {
                    self.off = true;
                    deadlines.http1();
                    return Ok(());
                }
                self.matched += n;
                data = &data[n..];
            } else if self.skip > 0 {
                let n = self.skip.min(data.len());
                self.skip -= n;
                data = &data[n..];
                if self.skip == 0 {
                    self.frame_read(deadlines);
                }
            } else {
                let n = (9 - self.have).min(data.len());
                self.head[self.have..self.have + n].copy_from_slice(&data[..n]);
                self.have += n;
                data = &data[n..];
                if self.have == 9 {
                    self.have = 0;
                    self.frame_head(counters, deadlines, &now)?;
                    if self.skip == 0 {
                        self.frame_read(deadlines);
                    }
                }
            }
        }
        Ok(())
    }

    /// A frame's 9-byte head was read: length (24 bits), type, flags, stream (RFC 9113 §4.1).
    fn frame_head(
        &mut self,
        counters: &H2Counters,
        deadlines: &Deadlines,
        now: &impl Fn() -> Instant,
    ) -> Result<(), Flood> {
        let h = self.head;
        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
        let (kind, flags) = (h[3], h[4]);
        self.skip = len;
        match kind {
            HEADERS | CONTINUATION => {
                if kind == HEADERS && !self.in_block {
                    self.in_block = true;
                    deadlines.header_started(now());
                }
                self.block_ends = flags & END_HEADERS != 0;
            }
            RST_STREAM => {
                counters.resets.fetch_add(1, Ordering::Relaxed);
            }
            DATA if len > 0 || flags & END_STREAM != 0 => {}
            WINDOW_UPDATE if self.credit >= BYTES_PER_UPDATE => {
                self.credit -= BYTES_PER_UPDATE;
            }
            // PRIORITY, SETTINGS, PUSH_PROMISE (refused by h2), PING, GOAWAY, an empty DATA
            // that does not end its stream, a WINDOW_UPDATE past the credit, unknown types.
            _ => self.control(now())?,
        }
        Ok(())
    }

    /// The frame whose head was read last has been read whole.
    fn frame_read(&mut self, deadlines: &Deadlines) {
        if self.block_ends {
            self.block_ends = false;
            self.in_block = false;
            deadlines.header_ended();
        }
    }

    /// Takes one frame's token at `now`.
    fn control(&mut self, now: Instant) -> Result<(), Flood> {
        if let Some(then) = self.refilled {
            let back = now.saturating_duration_since(then).as_secs_f64() * CONTROL_PER_SEC;
            self.tokens = (self.tokens + back).min(CONTROL_BURST);
        }
        self.refilled = Some(now);
        if self.tokens < 1.0 {
            self.flooded = true;
            return Err(Flood);
        }
        self.tokens -= 1.0;
        Ok(())
    }
}

/// Why a connection was HTTP/2 abuse, or `None`: `flooded`, the frame bound cut it off (a
/// [`Flood`]: h2 keeps only the kind of a read error, so the reader says so), or it ended with
/// `err`, h2's GOAWAY `ENHANCE_YOUR_CALM` (its own limits: rapid reset, CONTINUATION and DATA
/// floods).
pub fn abuse(flooded: bool, err: Option<&(dyn StdError + 'static)>) -> Option<&'static str> {
    if flooded {
        return Some(
            "HTTP/2 frame flood (PING, SETTINGS, PRIORITY, WINDOW_UPDATE, GOAWAY, empty DATA or unknown frames)",
        );
    }
    let mut at = err;
    while let Some(e) = at {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            if h2.is_go_away()
                && h2.is_library()
                && h2.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM)
            {
                return Some("HTTP/2 limits exceeded (rapid reset, CONTINUATION or DATA flood)");
            }
        }
        at = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::proxy::h2_deadline::Verdict;

    const PRIORITY: u8 = 0x2;
    const SETTINGS: u8 = 0x4;
    const PING: u8 = 0x6;
    const GOAWAY: u8 = 0x7;
    const ACK: u8 = 0x1;
    const T: Duration = Duration::from_secs(3);

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let len = (payload.len() as u32).to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, flags, 0, 0, 0, 1];
        f.extend_from_slice(payload);
        f
    }

    fn deadlines(t0: Instant) -> Deadlines {
        Deadlines::new(t0, T)
    }

    #[test]
    fn resets_are_counted_in_any_read_split_and_http1_is_ignored() {
        let t0 = Instant::now();
        let mut wire = PREFACE.to_vec();
        wire.extend(frame(SETTINGS, 0, &[0; 12]));
        for _ in 0..3 {
            wire.extend(frame(HEADERS, END_HEADERS, &[7; 30]));
            wire.extend(frame(RST_STREAM, 0, &[0, 0, 0, 8]));
        }
        // A payload holding what looks like an RST_STREAM header is skipped.
        wire.extend(frame(DATA, 0, &frame(RST_STREAM, 0, &[0; 4])));
        for split in [1, 5, 9, 24, wire.len()] {
            let c = H2Counters::default();
            let d = deadlines(t0);
            let mut s = FrameWatch::default();
            for chunk in wire.chunks(split) {
                s.feed(chunk, &c, &d).unwrap();
            }
            assert_eq!(c.resets.load(Ordering::Relaxed), 3, "split {split}");
        }
        let c = H2Counters::default();
        let d = deadlines(t0);
        let mut s = FrameWatch::default();
        s.feed(b"GET / HTTP/1.1\r\n\r\n", &c, &d).unwrap();
        s.feed(&frame(RST_STREAM, 0, &[0; 4]), &c, &d).unwrap();
        let pings: Vec<u8> = (0..1000).flat_map(|_| frame(PING, 0, &[0; 8])).collect();
        s.feed(&pings, &c, &d).unwrap();
        assert_eq!(c.resets.load(Ordering::Relaxed), 0);
        assert_eq!(
            d.verdict(t0 + 2 * T),
            Verdict::Off,
            "HTTP/1.1 is hyper's to time"
        );
    }

    #[test]
    fn frames_that_are_not_requests_past_the_burst_are_a_flood_and_refill_with_time() {
        let c = H2Counters::default();
        let t0 = Instant::now();
        let d = deadlines(t0);
        let burst = CONTROL_BURST as usize;
        // Each kind alone runs out at the burst: acknowledgements, WINDOW_UPDATE with nothing
        // written, an unknown type and an empty DATA cost as much as PING and SETTINGS.
        for kind in [
            frame(PING, 0, &[0; 8]),
            frame(PING, ACK, &[0; 8]),
            frame(SETTINGS, 0, &[]),
            frame(SETTINGS, ACK, &[]),
            frame(PRIORITY, 0, &[0; 5]),
            frame(WINDOW_UPDATE, 0, &[0, 0, 0, 1]),
            frame(GOAWAY, 0, &[0; 8]),
            frame(0x20, 0, &[1, 2, 3]),
            frame(DATA, 0, &[]),
        ] {
            let mut s = FrameWatch::default();
            s.feed_at(PREFACE, &c, &d, || t0).unwrap();
            let flood = kind.repeat(burst);
            s.feed_at(&flood, &c, &d, || t0).unwrap();
            s.feed_at(&kind, &c, &d, || t0).unwrap_err();
            // A flood is the connection's end: nothing read after it is taken.
            s.feed_at(&frame(DATA, 0, &[0; 8]), &c, &d, || t0)
                .unwrap_err();
        }
        // Requests and their bodies are not counted, nor an empty DATA ending its stream.
        let mut s = FrameWatch::default();
        s.feed_at(PREFACE, &c, &d, || t0).unwrap();
        let work = [
            frame(HEADERS, END_HEADERS, &[0x82]),
            frame(DATA, 0, &[0; 10]),
            frame(DATA, END_STREAM, &[]),
        ]
        .concat()
        .repeat(10 * burst);
        s.feed_at(&work, &c, &d, || t0).unwrap();

        // Spent at once, then a second later CONTROL_PER_SEC more.
        let mut s = FrameWatch::default();
        s.feed_at(PREFACE, &c, &d, || t0).unwrap();
        let pings = frame(PING, 0, &[0; 8]).repeat(burst);
        s.feed_at(&pings, &c, &d, || t0).unwrap();
        let t1 = t0 + Duration::from_secs(1);
        for _ in 0..CONTROL_PER_SEC as usize {
            s.feed_at(&frame(PING, 0, &[0; 8]), &c, &d, || t1).unwrap();
        }
        s.feed_at(&frame(PING, 0, &[0; 8]), &c, &d, || t1)
            .unwrap_err();
    }

    #[test]
    fn written_bytes_earn_window_updates() {
        let c = H2Counters::default();
        let t0 = Instant::now();
        let d = deadlines(t0);
        let update = frame(WINDOW_UPDATE, 0, &[0, 0, 0x40, 0]);
        let mut s = FrameWatch::default();
        s.feed_at(PREFACE, &c, &d, || t0).unwrap();
        // A 64 MiB download, written 16 KiB at a time, each answered by a stream and a
        // connection update: never near the bound, at the same instant.
        for _ in 0..4096 {
            s.wrote(16 * 1024);
            s.feed_at(&update.repeat(2), &c, &d, || t0).unwrap();
        }
        // The credit is banked up to its cap, and spent before the bound.
        s.wrote(usize::MAX / 2);
        let free = (CREDIT_CAP / BYTES_PER_UPDATE) as usize + CONTROL_BURST as usize;
        s.feed_at(&update.repeat(free), &c, &d, || t0).unwrap();
        s.feed_at(&update, &c, &d, || t0).unwrap_err();
    }

    #[test]
    fn header_blocks_are_timed_from_their_first_frame_to_their_last_byte() {
        let c = H2Counters::default();
        let t0 = Instant::now();
        let busy = |d: &std::sync::Arc<Deadlines>| d.open();
        let t1 = t0 + Duration::from_secs(1);
        let late = t1 + T;

        // HEADERS then CONTINUATIONs, the last with END_HEADERS, in any split.
        let mut wire = frame(HEADERS, 0, &[0x82, 0x86]);
        wire.extend(frame(CONTINUATION, 0, &[0x84]));
        wire.extend(frame(CONTINUATION, END_HEADERS, &[0x41, 1, b'a']));
        for split in [1, 7, 9, 10, wire.len()] {
            let d = std::sync::Arc::new(deadlines(t0));
            let _open = busy(&d);
            let mut s = FrameWatch::default();
            s.feed_at(PREFACE, &c, &d, || t0).unwrap();
            let (most, rest) = wire.split_at(wire.len() - 1);
            for chunk in most.chunks(split) {
                s.feed_at(chunk, &c, &d, || t1).unwrap();
            }
            assert_eq!(d.verdict(late), Verdict::HeadersLate, "split {split}");
            s.feed_at(rest, &c, &d, || t1).unwrap();
            assert_eq!(d.verdict(late), Verdict::Until(late + T), "split {split}");
        }

        // A HEADERS frame with END_HEADERS whose payload never all arrives.
        let d = std::sync::Arc::new(deadlines(t0));
        let _open = busy(&d);
        let mut s = FrameWatch::default();
        s.feed_at(PREFACE, &c, &d, || t0).unwrap();
        let whole = frame(HEADERS, END_HEADERS, &[0x82; 50]);
        s.feed_at(&whole[..30], &c, &d, || t1).unwrap();
        assert_eq!(d.verdict(late), Verdict::HeadersLate);
    }
}
