//! How an exchange with the upstream fails, and the counters of failures and connections that
//! every proxy thread's client shares (metrics read them).

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use http::uri::Authority;

/// Why forwarding failed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream {authority} is unreachable")]
    Unreachable {
        authority: Authority,
        #[source]
        source: std::io::Error,
    },
    #[error("upstream {authority} failed the exchange")]
    Failed {
        authority: Authority,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Not the upstream's fault: the client's request body was malformed or cut short, and
    /// the exchange was aborted.
    #[error("the client's request body broke off")]
    ClientBody {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("upstream {authority} sent no response within {timeout:?}")]
    Timeout {
        authority: Authority,
        timeout: Duration,
    },
}

/// Failures since start, by kind (for metrics).
#[derive(Debug, Default)]
pub struct UpstreamCounters {
    pub unreachable: AtomicU64,
    pub failed: AtomicU64,
    pub timeouts: AtomicU64,
    /// New TCP connections opened to the upstream.
    pub connects: AtomicU64,
    /// Exchanges aborted because the client's request body broke (answered 400; not an
    /// upstream failure).
    pub client_body_errors: AtomicU64,
    /// Gauge: upstream connections open now (idle or in use), over every proxy thread.
    pub open: AtomicU64,
    /// Gauge: requests waiting for a connection under `[http] upstream_max_connections`.
    pub waiting: AtomicU64,
}
