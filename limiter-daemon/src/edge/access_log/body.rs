//! [`Logged`]: a response body that counts the bytes it passes on and finishes its access log
//! line when it ends or is dropped (a client that hung up mid-body is logged with what it got).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Buf;
use hyper::body::{Body, Frame, SizeHint};

use super::handle::AccessLog;
use super::record::Record;

/// `B`, with the line it finishes. With the log off it only passes frames through.
pub struct Logged<B> {
    inner: B,
    line: Option<(AccessLog, Box<Record>)>,
    status: u16,
    sent: u64,
}

impl<B> Logged<B> {
    /// `inner`, finishing `line` (when there is one) with `status` and the bytes passed on.
    pub fn new(inner: B, log: &AccessLog, line: Option<Box<Record>>, status: u16) -> Self {
        Logged {
            inner,
            line: line.map(|l| (log.clone(), l)),
            status,
            sent: 0,
        }
    }

    fn finish(&mut self) {
        if let Some((log, line)) = self.line.take() {
            log.finish(Some(line), self.status, self.sent);
        }
    }
}

impl<B> Drop for Logged<B> {
    fn drop(&mut self) {
        self.finish();
    }
}

impl<B: Body + Unpin> Body for Logged<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.sent += data.remaining() as u64;
                }
            }
            Poll::Ready(None) => self.finish(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
