//! The client's request body on its way to the upstream (hyper's path). It passes frames
//! through unchanged and remembers whether it broke on the client's side (malformed chunked
//! framing, a client that hung up mid-body): hyper's client then aborts the upstream exchange
//! and reports a failure that, without this mark, looks like the upstream's. A broken request
//! body is the client's mistake: it gets `400`, counted apart from upstream failures, so no
//! client can fake upstream alerts.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// A request body read from the client, with a mark set when reading it failed.
pub struct RequestBody {
    inner: Incoming,
    broke: Arc<AtomicBool>,
}

/// Tells, after the exchange, whether the client's body broke.
#[derive(Clone, Debug)]
pub struct BodyWatch(Arc<AtomicBool>);

impl BodyWatch {
    pub fn client_body_broke(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl RequestBody {
    /// Wraps `inner`; the watch reports whether it broke.
    pub fn new(inner: Incoming) -> (Self, BodyWatch) {
        let broke = Arc::new(AtomicBool::new(false));
        (
            RequestBody {
                inner,
                broke: Arc::clone(&broke),
            },
            BodyWatch(broke),
        )
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Err(_))) = &polled {
            this.broke.store(true, Ordering::Release);
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
