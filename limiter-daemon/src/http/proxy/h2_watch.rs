//! The frames an HTTP/2 client sends, followed in the bytes hyper reads (hyper tells nothing
//! of them): RST_STREAM frames are counted for metrics, and the frames that ask the server for
//! work without being a request (PING and SETTINGS, each acknowledged, and PRIORITY) are
//! bounded per connection. [`abuse`] says when a connection's end was abuse: these floods,
//! or h2's own `ENHANCE_YOUR_CALM` limits (rapid reset, CONTINUATION and DATA floods).
//!
//! Why the bound: h2 keeps their memory bounded (one acknowledgement queued; it stops reading
//! while that is unsent), not their number. A client that reads its acknowledgements may send
//! PINGs or SETTINGS forever, a CPU cost with no request to meter (CVE-2019-9512, -9515). Each
//! connection gets [`CONTROL_BURST`] such frames, refilled at [`CONTROL_PER_SEC`]: far above
//! what browsers and gRPC keep-alives send (a few SETTINGS at the start, a PING now and then),
//! far below a flood. Past it the read fails with [`Flood`] and hyper drops the connection.
//!
//! The watch turns off at the first byte that is not the preface's: HTTP/1.1 connections pay
//! one comparison per read.

use std::error::Error as StdError;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::http::proxy::h2::{H2Counters, PREFACE};

/// Control frames (PING, SETTINGS, PRIORITY) a connection may send at once.
pub const CONTROL_BURST: f64 = 200.0;
/// Control frames per second a connection gets back after a burst.
pub const CONTROL_PER_SEC: f64 = 20.0;

/// Frame types (RFC 9113 §6).
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
/// The ACK flag of SETTINGS and PING: an answer to the server's own frame, not work for it.
const ACK: u8 = 0x1;

/// The client sent control frames faster than [`CONTROL_BURST`] and [`CONTROL_PER_SEC`] allow.
#[derive(Debug, thiserror::Error)]
#[error(
    "HTTP/2 control frame flood: PING, SETTINGS or PRIORITY frames past the connection's bound"
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
    /// Control frames left, and when they were last refilled (`None`: none seen yet).
    tokens: f64,
    refilled: Option<Instant>,
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
            tokens: CONTROL_BURST,
            refilled: None,
            flooded: false,
        }
    }
}

impl FrameWatch {
    /// Follows `data`, the next bytes read from the client.
    pub fn feed(&mut self, data: &[u8], counters: &H2Counters) -> Result<(), Flood> {
        self.feed_at(data, counters, Instant::now)
    }

    /// [`Self::feed`] with the clock passed in; it is read only when a control frame arrives.
    fn feed_at(
        &mut self,
        mut data: &[u8],
        counters: &H2Counters,
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
                    return Ok(());
                }
                self.matched += n;
                data = &data[n..];
            } else if self.skip > 0 {
                let n = self.skip.min(data.len());
                self.skip -= n;
                data = &data[n..];
            } else {
                let n = (9 - self.have).min(data.len());
                self.head[self.have..self.have + n].copy_from_slice(&data[..n]);
                self.have += n;
                data = &data[n..];
                if self.have == 9 {
                    self.have = 0;
                    let h = self.head;
                    // Length (24 bits), type, flags, stream (RFC 9113 §4.1).
                    self.skip = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
                    match (h[3], h[4] & ACK) {
                        (RST_STREAM, _) => {
                            counters.resets.fetch_add(1, Ordering::Relaxed);
                        }
                        (PING | SETTINGS, 0) | (PRIORITY, _) => {
                            self.control(now())?;
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }

    /// Takes one control frame's token at `now`.
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

/// Why a connection was HTTP/2 abuse, or `None`: `flooded`, the control-frame bound cut it
/// off (a [`Flood`]: h2 keeps only the kind of a read error, so the reader says so), or it
/// ended with `err`, h2's GOAWAY `ENHANCE_YOUR_CALM` (its own limits: rapid reset,
/// CONTINUATION and DATA floods).
pub fn abuse(flooded: bool, err: Option<&(dyn StdError + 'static)>) -> Option<&'static str> {
    if flooded {
        return Some("HTTP/2 PING, SETTINGS or PRIORITY flood");
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

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let len = (payload.len() as u32).to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, flags, 0, 0, 0, 1];
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn resets_are_counted_in_any_read_split_and_http1_is_ignored() {
        let mut wire = PREFACE.to_vec();
        wire.extend(frame(SETTINGS, 0, &[0; 12]));
        for _ in 0..3 {
            wire.extend(frame(0x1, 0, &[7; 30]));
            wire.extend(frame(RST_STREAM, 0, &[0, 0, 0, 8]));
        }
        // A payload holding what looks like an RST_STREAM header is skipped.
        wire.extend(frame(0x0, 0, &frame(RST_STREAM, 0, &[0; 4])));
        for split in [1, 5, 9, 24, wire.len()] {
            let c = H2Counters::default();
            let mut s = FrameWatch::default();
            for chunk in wire.chunks(split) {
                s.feed(chunk, &c).unwrap();
            }
            assert_eq!(c.resets.load(Ordering::Relaxed), 3, "split {split}");
        }
        let c = H2Counters::default();
        let mut s = FrameWatch::default();
        s.feed(b"GET / HTTP/1.1\r\n\r\n", &c).unwrap();
        s.feed(&frame(RST_STREAM, 0, &[0; 4]), &c).unwrap();
        let pings: Vec<u8> = (0..1000).flat_map(|_| frame(PING, 0, &[0; 8])).collect();
        s.feed(&pings, &c).unwrap();
        assert_eq!(c.resets.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn control_frames_past_the_burst_are_a_flood_and_refill_with_time() {
        let c = H2Counters::default();
        let t0 = Instant::now();
        let mut s = FrameWatch::default();
        s.feed_at(PREFACE, &c, || t0).unwrap();
        let burst = CONTROL_BURST as usize;
        let mixed: Vec<u8> = (0..burst)
            .flat_map(|i| match i % 3 {
                0 => frame(PING, 0, &[0; 8]),
                1 => frame(SETTINGS, 0, &[]),
                _ => frame(PRIORITY, 0, &[0; 5]),
            })
            .collect();
        s.feed_at(&mixed, &c, || t0).unwrap();
        // Acknowledgements of the server's own frames are not work for it.
        let acks: Vec<u8> = (0..1000)
            .flat_map(|_| [frame(PING, ACK, &[0; 8]), frame(SETTINGS, ACK, &[])].concat())
            .collect();
        s.feed_at(&acks, &c, || t0).unwrap();
        s.feed_at(&frame(PING, 0, &[0; 8]), &c, || t0).unwrap_err();
        // A flood is the connection's end: nothing read after it is taken.
        s.feed_at(&frame(0x0, 0, &[0; 8]), &c, || t0).unwrap_err();

        // Spent at once, then a second later CONTROL_PER_SEC more.
        let mut s = FrameWatch::default();
        s.feed_at(PREFACE, &c, || t0).unwrap();
        let pings: Vec<u8> = (0..burst).flat_map(|_| frame(PING, 0, &[0; 8])).collect();
        s.feed_at(&pings, &c, || t0).unwrap();
        let t1 = t0 + Duration::from_secs(1);
        for _ in 0..CONTROL_PER_SEC as usize {
            s.feed_at(&frame(PING, 0, &[0; 8]), &c, || t1).unwrap();
        }
        s.feed_at(&frame(PING, 0, &[0; 8]), &c, || t1).unwrap_err();
    }
}
