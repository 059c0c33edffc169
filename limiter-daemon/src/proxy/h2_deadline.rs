//! The time bounds of one HTTP/2 connection on the proxy, the same `header_read_timeout` the
//! HTTP/1.1 paths keep: a connection with no stream open must start one (its whole header
//! block read) within the timeout of its start or of its last stream's end, and a header block
//! once begun must end within the timeout of its first frame. PINGs, SETTINGS and the like do
//! not count: a client that only answers the server's PINGs is idle.
//!
//! Why here: hyper's HTTP/2 server has no header-read timer and no idle timeout, and says
//! nothing of the frames it reads. So the bytes the client sends mark where a header block
//! begins and ends ([`crate::proxy::h2_watch`]), a stream is open from the request
//! hyper hands the service until its response body is dropped ([`StreamOpen`], carried by
//! [`Tracked`]), and the connection's one timer ([`crate::proxy::front::hand_over`])
//! asks [`Deadlines::verdict`] when it fires, re-armed at the next deadline. Per stream that
//! costs two atomic operations and a clock read; HTTP/1.1 connections handed to hyper turn
//! the timer off at its first firing (hyper's own header timer bounds them).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Instant;

/// What the shared clock of one connection holds (see the module docs). Times are nanoseconds
/// since `base`, so each fits an atomic.
#[derive(Debug)]
pub struct Deadlines {
    base: Instant,
    timeout: Duration,
    /// Streams between their request and the drop of their response body.
    open: AtomicUsize,
    /// When `open` last fell to zero (0: the connection's start).
    idle_since: AtomicU64,
    /// When the header block being read began, plus one (0: none is being read).
    header_since: AtomicU64,
    /// The client spoke HTTP/1.1: hyper's own timer bounds it.
    http1: AtomicBool,
}

/// What the timer does when it fires.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing is due: fire again then.
    Until(Instant),
    /// No stream has been open for the timeout: close the connection (GOAWAY first).
    Idle,
    /// A header block has been left unfinished for the timeout: close the connection.
    HeadersLate,
    /// Not HTTP/2: this timer has nothing to bound.
    Off,
}

impl Deadlines {
    /// A connection starting at `base`, bounded by `timeout`.
    pub fn new(base: Instant, timeout: Duration) -> Self {
        Deadlines {
            base,
            timeout,
            open: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            header_since: AtomicU64::new(0),
            http1: AtomicBool::new(false),
        }
    }

    /// When the connection must have started its first stream.
    pub fn first(&self) -> Instant {
        self.base + self.timeout
    }

    fn since(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The client's first bytes were not the HTTP/2 preface.
    pub fn http1(&self) {
        self.http1.store(true, Ordering::Relaxed);
    }

    /// A header block's first frame arrived at `at`.
    pub fn header_started(&self, at: Instant) {
        self.header_since
            .store(self.since(at).saturating_add(1), Ordering::Relaxed);
    }

    /// The header block's last byte arrived.
    pub fn header_ended(&self) {
        self.header_since.store(0, Ordering::Relaxed);
    }

    /// A stream's request reached the service; it is open until the guard is dropped.
    pub fn open(self: &Arc<Self>) -> StreamOpen {
        self.open.fetch_add(1, Ordering::SeqCst);
        StreamOpen(Arc::clone(self))
    }

    /// What is due at `now`.
    pub fn verdict(&self, now: Instant) -> Verdict {
        if self.http1.load(Ordering::Relaxed) {
            return Verdict::Off;
        }
        let due = |since: u64| self.base + Duration::from_nanos(since) + self.timeout;
        let mut next = now + self.timeout;
        let header = self.header_since.load(Ordering::Relaxed);
        if header != 0 {
            let at = due(header - 1);
            if now >= at {
                return Verdict::HeadersLate;
            }
            next = next.min(at);
        }
        // `open` before `idle_since`: a stream's end writes them the other way round.
        if self.open.load(Ordering::SeqCst) == 0 {
            let at = due(self.idle_since.load(Ordering::SeqCst));
            if now >= at {
                // A header block begun is the stream that was due: h2 reads nothing else
                // until it ends, so a GOAWAY would wait for it in vain.
                return if header != 0 {
                    Verdict::HeadersLate
                } else {
                    Verdict::Idle
                };
            }
            next = next.min(at);
        }
        Verdict::Until(next)
    }
}

/// One open stream of a connection (see [`Deadlines::open`]); dropping it ends the stream.
#[derive(Debug)]
pub struct StreamOpen(Arc<Deadlines>);

impl Drop for StreamOpen {
    fn drop(&mut self) {
        let d = &self.0;
        d.idle_since
            .fetch_max(d.since(Instant::now()), Ordering::SeqCst);
        d.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that keeps its stream open (`Some`: HTTP/2) until h2 drops it: sent to
/// the end, reset by the client, or the connection gone.
#[derive(Debug)]
pub struct Tracked<B> {
    body: B,
    _open: Option<StreamOpen>,
}

impl<B> Tracked<B> {
    pub fn new(body: B, open: Option<StreamOpen>) -> Self {
        Tracked { body, _open: open }
    }
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(3);

    #[tokio::test(start_paused = true)]
    async fn idle_is_counted_from_the_start_and_from_the_last_stream() {
        let t0 = Instant::now();
        let d = Arc::new(Deadlines::new(t0, T));
        assert_eq!(d.first(), t0 + T);
        assert_eq!(d.verdict(t0), Verdict::Until(t0 + T));
        assert_eq!(d.verdict(t0 + T), Verdict::Idle);

        let a = d.open();
        let b = d.open();
        // Streams open: nothing due, look again a timeout later.
        assert_eq!(d.verdict(t0 + T), Verdict::Until(t0 + 2 * T));
        tokio::time::advance(Duration::from_secs(5)).await;
        drop(a);
        assert_eq!(d.verdict(t0 + 2 * T), Verdict::Until(t0 + 3 * T));
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(b);
        let last = t0 + Duration::from_secs(6);
        assert_eq!(d.verdict(last), Verdict::Until(last + T));
        assert_eq!(d.verdict(last + T), Verdict::Idle);
    }

    #[test]
    fn an_unfinished_header_block_is_late_whatever_else_is_open() {
        let t0 = Instant::now();
        let d = Arc::new(Deadlines::new(t0, T));
        let _busy = d.open();
        let began = t0 + Duration::from_secs(1);
        d.header_started(began);
        assert_eq!(d.verdict(began), Verdict::Until(began + T));
        assert_eq!(d.verdict(began + T), Verdict::HeadersLate);
        d.header_ended();
        assert_eq!(d.verdict(began + T), Verdict::Until(began + 2 * T));

        // A connection's first header block, begun after its start, is due with the start's
        // deadline: the stream it opens had to be there by then.
        let d = Deadlines::new(t0, T);
        d.header_started(began);
        assert_eq!(d.verdict(t0 + T), Verdict::HeadersLate);
    }

    #[test]
    fn http1_turns_it_off() {
        let t0 = Instant::now();
        let d = Deadlines::new(t0, T);
        d.http1();
        assert_eq!(d.verdict(t0 + 10 * T), Verdict::Off);
    }
}
