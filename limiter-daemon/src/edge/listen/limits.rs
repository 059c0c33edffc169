//! The bounds every API, admin and metrics listener serves with, read from `[http]` (one set
//! of settings for all three, shared with the proxy where they mean the same; the gRPC
//! listener takes its cap and head timeout from here too).

use std::num::NonZeroUsize;
use std::time::Duration;

use super::budget::ConnectionBudget;
use crate::config::http::HttpSettings;

/// What one listener allows a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenLimits {
    /// `[http] header_read_timeout`: time for a request head to arrive, counted from the
    /// connection's start or the end of the previous response, so it also closes idle
    /// keep-alive connections (the proxy's loop counts it the same way).
    pub header_read_timeout: Duration,
    /// `[http] body_read_timeout`: time for a request body to arrive, counted from its head.
    pub body_read_timeout: Duration,
    /// `[http] api_max_connections`, or its share of the descriptor limit
    /// ([`super::budget`]): connections open at once on one listener.
    pub max_connections: NonZeroUsize,
    /// `[http] shutdown_grace`: how long requests may finish once the listener stops.
    pub shutdown_grace: Duration,
}

impl ListenLimits {
    pub fn from_settings(s: &HttpSettings) -> Self {
        ListenLimits {
            header_read_timeout: s.header_read_timeout,
            body_read_timeout: s.body_read_timeout,
            max_connections: ConnectionBudget::for_process(s).per_listener,
            shutdown_grace: s.shutdown_grace,
        }
    }
}

impl Default for ListenLimits {
    fn default() -> Self {
        ListenLimits::from_settings(&HttpSettings::default())
    }
}
