//! Looking at a connection's first bytes without taking them off the socket, once enough have
//! arrived: the PROXY protocol header ([`super::proxy_protocol`]) and the gRPC listener's
//! HTTP/2 preface are judged this way, and the bytes stay for whoever serves the connection.
//!
//! The wait is on readiness, never a timer. Peeked bytes leave the socket readable, so waiting
//! for "readable" again returns at once: the PROXY reader used to sleep 1 ms and peek again
//! instead, and 1,000 connections holding a partial header cost 39 % of a core (issue 35, D7).
//! Here the socket's receive low-water mark (`SO_RCVLOWAT`) is set to the bytes wanted, so
//! the kernel reports it readable only once they are there (or the peer has closed), and the
//! mark is put back to 1 when the wait ends, however it ends.

use std::io;
use std::os::fd::AsRawFd;

use tokio::io::Interest;
use tokio::net::TcpStream;

/// Sets `SO_RCVLOWAT` on a socket.
fn set_low_water(stream: &TcpStream, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from `value`, which outlives the
    // call; the descriptor belongs to `stream`.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            std::ptr::from_ref(&value).cast(),
            libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>()).unwrap_or(4),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Puts the low-water mark back to 1 (what every later read expects) when dropped.
struct LowWater<'a>(&'a TcpStream);

impl Drop for LowWater<'_> {
    fn drop(&mut self) {
        if let Err(err) = set_low_water(self.0, 1) {
            tracing::debug!(error = %err, "cannot reset SO_RCVLOWAT");
        }
    }
}

/// One non-blocking `MSG_PEEK` read.
fn peek_now(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: recv writes at most `buf.len()` bytes into `buf`; the descriptor belongs to
    // `stream`.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Peeks into `buf` once at least `want` bytes (at most `buf.len()`) are there, or the peer
/// has closed its side (then what there is: fewer than `want`, 0 when nothing came). Callers
/// bound the wait with a timeout.
pub async fn peek_at_least(stream: &TcpStream, buf: &mut [u8], want: usize) -> io::Result<usize> {
    let want = want.clamp(1, buf.len().max(1));
    // 1 is the socket's own mark: nothing to set, nothing to put back.
    let _reset = if want > 1 {
        set_low_water(stream, want)?;
        Some(LowWater(stream))
    } else {
        None
    };
    loop {
        let ready = stream.ready(Interest::READABLE).await?;
        let closed = ready.is_read_closed() || ready.is_error();
        let peeked = stream.try_io(Interest::READABLE, || {
            let n = peek_now(stream, buf)?;
            if n < want && n > 0 && !closed {
                // Readiness from before the mark was set, or a wake-up with too few bytes:
                // tokio clears it on WouldBlock, and the next edge comes with enough bytes.
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match peeked {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (c, s)
    }

    /// Polls `fut` for `window` (real time), counting its polls.
    async fn polls_within<F: Future>(fut: F, window: Duration) -> (Option<F::Output>, usize) {
        let polls = AtomicUsize::new(0);
        let mut fut = pin!(fut);
        let counted = std::future::poll_fn(|cx| {
            polls.fetch_add(1, Ordering::Relaxed);
            fut.as_mut().poll(cx)
        });
        let out = tokio::time::timeout(window, counted).await.ok();
        (out, polls.load(Ordering::Relaxed))
    }

    #[tokio::test]
    async fn waits_for_the_bytes_wanted_without_polling_and_takes_none() {
        let (mut c, mut s) = pair().await;
        c.write_all(b"PRI * HTTP").await.unwrap();
        let mut buf = [0u8; 24];
        let (done, polls) =
            polls_within(peek_at_least(&s, &mut buf, 24), Duration::from_millis(300)).await;
        assert!(done.is_none(), "returned with 10 of 24 bytes");
        assert!(polls <= 3, "{polls} polls in 300 ms while waiting");
        c.write_all(b"/2.0\r\n\r\nSM\r\n\r\nmore").await.unwrap();
        let n = tokio::time::timeout(Duration::from_secs(5), peek_at_least(&s, &mut buf, 24))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[..n], b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        // Nothing was taken, and the mark is back to 1: a short read is not held back.
        let mut all = [0u8; 64];
        let n = s.read(&mut all).await.unwrap();
        assert_eq!(&all[..n], b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\nmore");
        c.write_all(b"x").await.unwrap();
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut all))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&all[..n], b"x");
    }

    #[tokio::test]
    async fn a_peer_that_closes_early_ends_the_wait_with_what_it_sent() {
        let (mut c, s) = pair().await;
        c.write_all(b"PRI").await.unwrap();
        c.shutdown().await.unwrap();
        let mut buf = [0u8; 24];
        let n = tokio::time::timeout(Duration::from_secs(5), peek_at_least(&s, &mut buf, 24))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[..n], b"PRI");
        let (gone, s) = pair().await;
        drop(gone);
        let n = tokio::time::timeout(Duration::from_secs(5), peek_at_least(&s, &mut buf, 24))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 0);
    }
}
