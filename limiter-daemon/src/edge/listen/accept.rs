//! The accept loop every listener runs ([`accept_until`]), and what it does when `accept`
//! fails, or when it refuses a connection at a cap ([`Cap`]): back off (growing, so a
//! descriptor shortage is not turned into a busy loop) and log at most one line per
//! [`LOG_EVERY`] with the count of what it did not log.
//!
//! Why: a listening socket with a connection waiting stays readable while `accept` fails
//! (`EMFILE`: no descriptor for it), so a loop that retries at once spins, and a loop that logs
//! each failure wrote hundreds of lines a second (issue 35, D1). The caps
//! ([`super::budget`]) keep descriptors free so this is rare; it is the last line.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// At most one line per this long from one loop, per kind of event.
pub const LOG_EVERY: Duration = Duration::from_secs(10);
/// First pause after a failed `accept`; each further failure in a row doubles it.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
/// Longest pause after a failed `accept`.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// Lets a line through at most once per [`LOG_EVERY`].
#[derive(Debug, Default)]
pub struct Throttled {
    last: Option<Instant>,
    skipped: u64,
}

impl Throttled {
    /// `Some(n)` when a line may be logged now, `n` being the events not logged since the
    /// last one; `None` (counted) otherwise.
    pub fn take(&mut self) -> Option<u64> {
        let now = Instant::now();
        match self.last {
            Some(at) if now.duration_since(at) < LOG_EVERY => {
                self.skipped += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.skipped))
            }
        }
    }
}

/// One accept loop's failures.
#[derive(Debug)]
pub struct AcceptErrors {
    role: &'static str,
    pause: Duration,
    log: Throttled,
}

impl AcceptErrors {
    /// `role` names the listener in logs (e.g. `"http.proxy_listen"`).
    pub fn new(role: &'static str) -> Self {
        AcceptErrors {
            role,
            pause: FIRST_PAUSE,
            log: Throttled::default(),
        }
    }

    /// A connection was accepted: the next failure pauses briefly again.
    pub fn accepted(&mut self) {
        self.pause = FIRST_PAUSE;
    }

    /// `accept` failed with `err`: logs (throttled) and pauses before the next try.
    pub async fn failed(&mut self, err: &io::Error) {
        if let Some(unlogged) = self.log.take() {
            tracing::warn!(
                error = %err,
                listener = self.role,
                unlogged,
                "accept failed (out of descriptors? see the descriptor limit and the connection \
                 caps in the log at start); pausing this listener"
            );
        }
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(MAX_PAUSE);
    }
}

/// Accepts on `listener` until `stop` resolves, handing each connection to `take`; a failed
/// `accept` pauses the loop ([`AcceptErrors`]). `role` names the listener in logs.
pub async fn accept_until(
    listener: &TcpListener,
    role: &'static str,
    stop: impl Future<Output = ()>,
    mut take: impl FnMut(TcpStream, SocketAddr),
) {
    let mut errors = AcceptErrors::new(role);
    let mut stop = pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    errors.accepted();
                    take(stream, peer);
                }
                Err(err) => errors.failed(&err).await,
            },
            () = &mut stop => return,
        }
    }
}

/// A listener's connection cap: at most `max` connections at once, a refusal past it logged
/// (throttled).
#[derive(Debug)]
pub struct Cap {
    slots: Arc<Semaphore>,
    max: NonZeroUsize,
    role: &'static str,
    full: Throttled,
}

impl Cap {
    pub fn new(max: NonZeroUsize, role: &'static str) -> Self {
        Cap {
            slots: Arc::new(Semaphore::new(max.get())),
            max,
            role,
            full: Throttled::default(),
        }
    }

    /// A place under the cap for `peer`'s connection, held until dropped; `None` (logged) at
    /// the cap, where the connection is `refused` (how the caller answers it).
    pub fn take(&mut self, peer: SocketAddr, refused: &str) -> Option<OwnedSemaphorePermit> {
        let slot = Arc::clone(&self.slots).try_acquire_owned().ok();
        if slot.is_none() {
            tracing::debug!(%peer, listener = self.role, "connection refused: at the connection cap");
            if let Some(unlogged) = self.full.take() {
                tracing::warn!(
                    listener = self.role,
                    max_connections = self.max.get(),
                    unlogged,
                    "connection cap reached: new connections are {refused} until some close \
                     (http.api_max_connections)"
                );
            }
        }
        slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_line_per_period_and_a_growing_pause() {
        let mut t = Throttled::default();
        assert_eq!(t.take(), Some(0));
        for _ in 0..500 {
            assert_eq!(t.take(), None);
        }
        tokio::time::advance(LOG_EVERY).await;
        assert_eq!(t.take(), Some(500));

        let mut e = AcceptErrors::new("test");
        let err = io::Error::from_raw_os_error(libc::EMFILE);
        let started = Instant::now();
        for _ in 0..10 {
            e.failed(&err).await;
        }
        // 10 + 20 + … capped at 1 s: ten failures in a row take seconds, not 10 × 50 ms.
        let waited = started.elapsed();
        assert!(waited > Duration::from_secs(4), "{waited:?}");
        e.accepted();
        let again = Instant::now();
        e.failed(&err).await;
        assert_eq!(again.elapsed(), FIRST_PAUSE);
    }
}
