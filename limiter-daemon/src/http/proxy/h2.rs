//! HTTP/2 on the proxy listeners: the server builder every handed-over connection is served
//! by (hyper-util's auto builder: HTTP/1.1, or HTTP/2 when the client opens with the h2
//! preface: prior knowledge on plain TCP, after ALPN `h2` over TLS), its bounds from
//! `[http]`, and the stream counters (`h2_streams_total`, `h2_stream_resets_total`: the
//! client's RST_STREAM frames, followed in the bytes it sends).
//!
//! Each stream is one request through [`crate::http::proxy::hyper::handle`]: its own limits
//! check, decision and 429; the upstream stays HTTP/1.1 over the pool. hyper's h2 server drops
//! the connection-specific fields (`Connection`, `Keep-Alive`, `Transfer-Encoding`, `Upgrade`)
//! of responses, and the h2 codec refuses requests that carry them (RFC 9113 §8.2.2).
//!
//! Rapid reset (CVE-2023-44487) is bounded twice: a stream reset before hyper accepted it
//! counts toward `h2_max_pending_accept_reset_streams` (past it, GOAWAY); one reset after it
//! was accepted has already been decided, so it is metered like any request and a caller that
//! opens and cancels streams fast runs through its burst like one sending them.
//! CONTINUATION floods end at the header-list size; SETTINGS and PING floods are bounded by
//! the h2 codec (it stops reading while its queued acknowledgements are unsent).

use std::sync::atomic::{AtomicU64, Ordering};

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;

use crate::config::http::HttpSettings;
use crate::http::proxy::limits::HeaderLimits;

/// The first bytes of every HTTP/2 connection (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Streams served over HTTP/2 and RST_STREAM frames received from clients.
#[derive(Debug, Default)]
pub struct H2Counters {
    pub streams: AtomicU64,
    pub resets: AtomicU64,
}

/// Counts the HTTP/2 requests hyper hands to the proxy.
pub fn count_stream(counters: &H2Counters, h2: bool) {
    if h2 {
        counters.streams.fetch_add(1, Ordering::Relaxed);
    }
}

/// Watches the bytes a client sends and counts its RST_STREAM frames. hyper tells nothing of
/// resets (a stream reset before it was accepted never reaches the proxy's code), so the
/// frame headers are followed here: 9 bytes each (RFC 9113 §4.1), the payload skipped. Off
/// at the first byte that is not the preface's: HTTP/1.1 connections pay one comparison.
#[derive(Debug, Default)]
pub struct ResetSniffer {
    matched: usize,
    head: [u8; 9],
    have: usize,
    skip: usize,
    off: bool,
}

/// RST_STREAM (RFC 9113 §6.4).
const RST_STREAM: u8 = 0x3;

impl ResetSniffer {
    /// Follows `data`, the next bytes read from the client.
    pub fn feed(&mut self, mut data: &[u8], counters: &H2Counters) {
        while !data.is_empty() && !self.off {
            if self.matched < PREFACE.len() {
                let n = (PREFACE.len() - self.matched).min(data.len());
                if data[..n] != PREFACE[self.matched..self.matched + n] {
                    self.off = true;
                    return;
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
                    self.skip = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
                    if h[3] == RST_STREAM {
                        counters.resets.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

/// The server for handed-over connections: HTTP/1.1 as before, HTTP/2 unless `http2 = false`.
pub fn server_builder(
    settings: &HttpSettings,
    limits: HeaderLimits,
) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    {
        let mut h1 = b.http1();
        h1.timer(TokioTimer::new())
            .header_read_timeout(settings.header_read_timeout)
            .keep_alive(true);
        if let Some(max) = limits.parser_max_headers() {
            h1.max_headers(max);
        }
    }
    let h2 = &settings.h2;
    if !h2.enabled {
        return b.http1_only();
    }
    // RFC 7541 §4.1 counts 32 bytes per field on top of name and value.
    let list = limits
        .max_bytes
        .saturating_add(limits.max_count.saturating_mul(32));
    b.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(h2.max_concurrent_streams)
        .max_pending_accept_reset_streams(h2.max_pending_accept_reset_streams)
        .max_local_error_reset_streams(h2.max_local_error_reset_streams)
        .max_header_list_size(u32::try_from(list).unwrap_or(u32::MAX))
        .keep_alive_interval(h2.keep_alive_interval)
        .keep_alive_timeout(h2.keep_alive_timeout);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let len = (payload.len() as u32).to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, 0, 0, 0, 0, 1];
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn resets_are_counted_in_any_read_split_and_http1_is_ignored() {
        let mut wire = PREFACE.to_vec();
        wire.extend(frame(0x4, &[0; 12]));
        for _ in 0..3 {
            wire.extend(frame(0x1, &[7; 30]));
            wire.extend(frame(RST_STREAM, &[0, 0, 0, 8]));
        }
        // A payload holding what looks like an RST_STREAM header is skipped.
        wire.extend(frame(0x0, &frame(RST_STREAM, &[0; 4])));
        for split in [1, 5, 9, 24, wire.len()] {
            let c = H2Counters::default();
            let mut s = ResetSniffer::default();
            for chunk in wire.chunks(split) {
                s.feed(chunk, &c);
            }
            assert_eq!(c.resets.load(Ordering::Relaxed), 3, "split {split}");
        }
        let c = H2Counters::default();
        let mut s = ResetSniffer::default();
        s.feed(b"GET / HTTP/1.1\r\n\r\n", &c);
        s.feed(&frame(RST_STREAM, &[0; 4]), &c);
        assert_eq!(c.resets.load(Ordering::Relaxed), 0);
    }
}
