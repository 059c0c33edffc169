//! A request body with a read deadline: once it has passed with the body still incomplete,
//! the next read fails and a flag tells the server to answer `408` and close (see
//! [`crate::edge::listen::serve`]). The timer is made only when a read has to wait, so a
//! request whose body is already in (or has none) costs no timer.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The error a read past the deadline returns.
#[derive(Debug, thiserror::Error)]
#[error("request body not received within the body read timeout")]
pub struct BodyTimedOut;

/// Wraps `B`; reads fail once `deadline` has passed and the body has not ended.
pub struct DeadlineBody<B> {
    inner: B,
    deadline: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
    fired: Arc<AtomicBool>,
}

impl<B> DeadlineBody<B> {
    /// `fired` is set when the deadline cut the body off.
    pub fn new(inner: B, deadline: Instant, fired: Arc<AtomicBool>) -> Self {
        DeadlineBody {
            inner,
            deadline,
            sleep: None,
            fired,
        }
    }
}

impl<B> Body for DeadlineBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if sleep.as_mut().poll(cx).is_ready() {
            this.fired.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(BodyTimedOut.into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::time::Duration;

    /// One frame, then nothing more (a client that stopped sending midway).
    struct Half(bool);

    impl Body for Half {
        type Data = Bytes;
        type Error = BoxError;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            let this = self.get_mut();
            if std::mem::replace(&mut this.0, true) {
                return Poll::Pending;
            }
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"half")))))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_still_incomplete_at_the_deadline_fails_and_says_so() {
        let fired = Arc::new(AtomicBool::new(false));
        let body = DeadlineBody::new(
            Half(false),
            Instant::now() + Duration::from_secs(1),
            Arc::clone(&fired),
        );
        let err = body.collect().await.unwrap_err();
        assert!(err.is::<BodyTimedOut>(), "{err}");
        assert!(fired.load(Ordering::Relaxed));
    }

    #[tokio::test(start_paused = true)]
    async fn a_complete_body_is_passed_through_without_a_timer() {
        let fired = Arc::new(AtomicBool::new(false));
        let body = DeadlineBody::new(
            http_body_util::Full::new(Bytes::from_static(b"whole")),
            Instant::now(),
            Arc::clone(&fired),
        );
        let got = body.collect().await.unwrap().to_bytes();
        assert_eq!(&got[..], b"whole");
        assert!(!fired.load(Ordering::Relaxed));
    }
}
