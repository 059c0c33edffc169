//! The HTTP/2 part of `[http]`: whether the proxy listeners speak it (prior knowledge on
//! `proxy_listen`, ALPN `h2` on `tls_listen`) and the bounds a connection gets: concurrent
//! streams, the rapid-reset guards (CVE-2023-44487) and the keep-alive ping. The header-list
//! size is not a field: it follows `max_header_bytes`, and the header and idle timeout is
//! `header_read_timeout`, as on HTTP/1.1 (see `crate::proxy::h2_deadline`). Checked with
//! the rest of `[http]`.

use std::time::Duration;

use super::ConfigError;

/// The `[http]` fields this module reads, as written in the file.
#[derive(Clone, Debug, Default)]
pub struct RawH2 {
    pub http2: Option<bool>,
    pub h2_max_concurrent_streams: Option<u32>,
    pub h2_keep_alive_interval: Option<Duration>,
    pub h2_keep_alive_timeout: Option<Duration>,
}

/// Validated HTTP/2 settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct H2Settings {
    /// `false`: HTTP/1.1 only (no `h2` in ALPN, the preface is refused).
    pub enabled: bool,
    /// Streams a client may have open at once on one connection (SETTINGS, default 100).
    pub max_concurrent_streams: u32,
    /// Streams reset by the client before the proxy accepted them, per connection, past which
    /// the connection is closed with GOAWAY (default 20: hyper's rapid-reset bound).
    pub max_pending_accept_reset_streams: usize,
    /// Streams the proxy had to reset for the client's protocol errors, per connection, past
    /// which the connection is closed (default 1024).
    pub max_local_error_reset_streams: usize,
    /// A PING is sent after this long without a frame (default 30s).
    pub keep_alive_interval: Duration,
    /// The connection is closed when a PING is not answered within this (default 10s).
    pub keep_alive_timeout: Duration,
}

impl H2Settings {
    pub fn validate(raw: RawH2) -> Result<Self, ConfigError> {
        let streams = raw.h2_max_concurrent_streams.unwrap_or(100);
        if streams == 0 {
            return Err(ConfigError::invalid(
                "http.h2_max_concurrent_streams",
                "must be at least 1",
            ));
        }
        Ok(H2Settings {
            enabled: raw.http2.unwrap_or(true),
            max_concurrent_streams: streams,
            // Not settings: the rapid-reset guards stay at hyper's recommended bounds.
            max_pending_accept_reset_streams: 20,
            max_local_error_reset_streams: 1024,
            keep_alive_interval: raw
                .h2_keep_alive_interval
                .unwrap_or(Duration::from_secs(30)),
            keep_alive_timeout: raw.h2_keep_alive_timeout.unwrap_or(Duration::from_secs(10)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_zero_bounds_refused() {
        let d = H2Settings::validate(RawH2::default()).unwrap();
        assert!(d.enabled);
        assert_eq!(d.max_concurrent_streams, 100);
        let err = H2Settings::validate(RawH2 {
            h2_max_concurrent_streams: Some(0),
            ..RawH2::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("http.h2_max_concurrent_streams"));
    }
}
