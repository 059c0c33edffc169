//! A tunnel's life once both sides are upgraded: bytes copied both ways until either side
//! ends it, no byte moves for the idle timeout, the shutdown grace period ends, or the caller
//! is locked out. The reason is recorded on the permit, which counts the close when dropped.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::proxy::tunnel::registry::{CloseReason, TunnelPermit};

/// Copies between `client` and `upstream` until one of the ends above.
pub async fn join(
    client: Upgraded,
    upstream: Upgraded,
    mut permit: TunnelPermit,
    idle: Duration,
    grace_over: CancellationToken,
) {
    let base = Instant::now();
    let seen = Arc::new(AtomicU64::new(0));
    let mut c = Watched {
        io: TokioIo::new(client),
        seen: Arc::clone(&seen),
        base,
    };
    let mut u = Watched {
        io: TokioIo::new(upstream),
        seen: Arc::clone(&seen),
        base,
    };
    let idle_out = async {
        loop {
            let last = base + Duration::from_millis(seen.load(Ordering::Relaxed));
            let due = last + idle;
            if Instant::now() >= due {
                return;
            }
            tokio::time::sleep_until(due).await;
        }
    };
    let kill = permit.kill.clone();
    permit.reason = tokio::select! {
        copied = tokio::io::copy_bidirectional(&mut c, &mut u) => {
            if let Err(err) = copied {
                tracing::debug!(error = %err, "tunnel ended with an error");
            }
            CloseReason::Peer
        }
        () = idle_out => CloseReason::Idle,
        () = grace_over.cancelled() => CloseReason::Shutdown,
        () = kill.cancelled() => CloseReason::Lockout,
    };
    tracing::debug!(reason = permit.reason.label(), "tunnel closed");
}

/// One side of a tunnel, noting when it last moved a byte.
struct Watched {
    io: TokioIo<Upgraded>,
    seen: Arc<AtomicU64>,
    base: Instant,
}

impl Watched {
    fn touch(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.seen.store(ms, Ordering::Relaxed);
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
