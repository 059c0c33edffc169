//! [`AccessLog`]: the handle every surface holds. Cloning it is a reference count; with the
//! log off it is `None` inside and every call returns at once without allocating.
//!
//! Writing never waits: a line goes into a bounded channel to the writer thread with
//! `try_send`, and when the channel is full (a full disk, a slow or blocked log) the line is
//! dropped, counted in `<ns>_access_log_dropped_total`, and said in the daemon's own log at
//! most once every [`WARN_EVERY`].

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderMap;
use prometheus_client::metrics::counter::Counter;

use super::record::{Record, Seen};

/// The longest the daemon's own log stays silent about dropped lines while they are dropped.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// What the request side and the writer share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) dropped: Counter,
    /// Set by `SIGUSR1`: the writer reopens its file before its next line.
    pub(super) reopen: AtomicBool,
    /// Milliseconds after `epoch` of the last warning about dropped lines (0: none yet).
    last_warn_ms: AtomicU64,
    epoch: Instant,
}

impl Shared {
    pub(super) fn new(dropped: Counter) -> Shared {
        Shared {
            dropped,
            reopen: AtomicBool::new(false),
            last_warn_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Counts `n` lines dropped, and says so in the daemon's log unless it did lately.
    pub(super) fn drop_lines(&self, n: u64, why: &str) {
        let total = self.dropped.inc_by(n) + n;
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX) + 1;
        let last = self.last_warn_ms.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= WARN_EVERY.as_millis() as u64;
        if due
            && self
                .last_warn_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                dropped_total = total,
                "access log: lines dropped ({why}); requests are answered as usual \
                 (metric access_log_dropped_total)"
            );
        }
    }
}

/// The handle to the access log (off by default).
#[derive(Clone, Debug, Default)]
pub struct AccessLog {
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    tx: SyncSender<Box<Record>>,
    shared: Arc<Shared>,
}

impl AccessLog {
    /// No access log: every call returns at once.
    pub fn off() -> AccessLog {
        AccessLog::default()
    }

    pub(super) fn new(tx: SyncSender<Box<Record>>, shared: Arc<Shared>) -> AccessLog {
        AccessLog {
            inner: Some(Arc::new(Inner { tx, shared })),
        }
    }

    pub fn is_on(&self) -> bool {
        self.inner.is_some()
    }

    /// Starts a line for a request (`None` with the log off: nothing to fill).
    pub fn start(&self, seen: &Seen<'_>) -> Option<Box<Record>> {
        self.inner.as_ref()?;
        Some(Box::new(Record::new(seen)))
    }

    /// Finishes `record` (status, body bytes, duration) and hands it to the writer without
    /// waiting.
    pub fn finish(&self, record: Option<Box<Record>>, status: u16, bytes: u64) {
        let (Some(inner), Some(mut record)) = (&self.inner, record) else {
            return;
        };
        record.status = status;
        record.bytes = bytes;
        record.duration_us = u64::try_from(record.started.elapsed().as_micros()).unwrap_or(0);
        match inner.tx.try_send(record) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => inner
                .shared
                .drop_lines(1, "the writer cannot keep up: a full disk or a slow log"),
            Err(TrySendError::Disconnected(_)) => {
                inner.shared.drop_lines(1, "the writer has stopped")
            }
        }
    }

    /// Asks the writer to reopen its file (`SIGUSR1`, after logrotate moved it).
    pub fn reopen(&self) {
        if let Some(inner) = &self.inner {
            inner.shared.reopen.store(true, Ordering::Release);
        }
    }

    /// Lines dropped so far.
    pub fn dropped(&self) -> u64 {
        self.inner.as_ref().map_or(0, |i| i.shared.dropped.get())
    }
}

/// The `User-Agent` and `Host` of `headers`, as raw bytes (empty when absent).
pub fn agent_and_host(headers: &HeaderMap) -> (&[u8], &[u8]) {
    let field = |name: http::header::HeaderName| {
        headers
            .get(name)
            .map_or(&b""[..], http::HeaderValue::as_bytes)
    };
    (field(http::header::USER_AGENT), field(http::header::HOST))
}

/// A placeholder for "not known" addresses in tests and surfaces that have none.
pub const UNKNOWN: IpAddr = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
