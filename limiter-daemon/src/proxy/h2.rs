//! HTTP/2 on the proxy listeners: the server builder every handed-over connection is served
//! by (hyper-util's auto builder: HTTP/1.1, or HTTP/2 when the client opens with the h2
//! preface: prior knowledge on plain TCP, after ALPN `h2` over TLS), its bounds from
//! `[http]`, the stream counters (`h2_streams_total`, `h2_stream_resets_total`: the
//! client's RST_STREAM frames, followed in the bytes it sends by
//! [`crate::proxy::h2_watch`]). hyper's h2 server has no header-read or idle timer:
//! `header_read_timeout` bounds its header blocks and idle connections in
//! [`crate::proxy::h2_deadline`].
//!
//! Each stream is one request through [`crate::proxy::hyper::handle`]: its own limits
//! check, decision and 429; the upstream stays HTTP/1.1 over the pool. hyper's h2 server drops
//! the connection-specific fields (`Connection`, `Keep-Alive`, `Transfer-Encoding`, `Upgrade`)
//! of responses, and the h2 codec refuses requests that carry them (RFC 9113 §8.2.2).
//!
//! Rapid reset (CVE-2023-44487): every stream hyper accepts is decided, reset or not (a
//! stream the client resets before it was accepted waits in h2's accept queue and is decided
//! when it comes out), so a caller that opens and cancels streams fast runs through its burst
//! like one sending them (strike, lockout). What escapes the meter are the streams still
//! queued when h2 closes a connection that holds more than
//! `h2_max_pending_accept_reset_streams` of them (GOAWAY `ENHANCE_YOUR_CALM`). That end, h2's
//! other `ENHANCE_YOUR_CALM` ends (CONTINUATION frames past the header-list size, a flood of
//! small DATA frames, too many streams it had to reset for protocol errors) and the
//! frame bound of [`crate::proxy::h2_watch`] (PING, SETTINGS, WINDOW_UPDATE, unknown
//! frame floods and the like) are
//! abuse ([`crate::proxy::h2_watch::abuse`]): the connection is closed and the caller
//! struck, as a burst would strike it.

use std::sync::atomic::{AtomicU64, Ordering};

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;

use crate::config::http::HttpSettings;
use crate::edge::limits::HeaderLimits;

/// The first bytes of every HTTP/2 connection (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Streams served over HTTP/2, RST_STREAM frames received from clients, and connections
/// closed for abuse (see [`crate::proxy::h2_watch::abuse`]).
#[derive(Debug, Default)]
pub struct H2Counters {
    pub streams: AtomicU64,
    pub resets: AtomicU64,
    pub abuse_closes: AtomicU64,
}

/// Counts the HTTP/2 requests hyper hands to the proxy.
pub fn count_stream(counters: &H2Counters, h2: bool) {
    if h2 {
        counters.streams.fetch_add(1, Ordering::Relaxed);
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
