//! What an accept loop does when `accept` fails, or when it refuses a connection at a cap:
//! back off (growing, so a descriptor shortage is not turned into a busy loop) and log at most
//! one line per [`LOG_EVERY`] with the count of what it did not log.
//!
//! Why: a listening socket with a connection waiting stays readable while `accept` fails
//! (`EMFILE`: no descriptor for it), so a loop that retries at once spins, and a loop that logs
//! each failure wrote hundreds of lines a second (issue 35, D1). The caps
//! ([`super::budget`]) keep descriptors free so this is rare; it is the last line.

use std::io;
use std::time::Duration;

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
