//! The ring buffer of sampled over-ceiling SYNs: read asynchronously, counted for metrics and
//! logged at debug level. Never a source of lockouts (SYNs are spoofable).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aya::maps::{MapData, RingBuf};
use limiter_common::CeilingEvent;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::addr::key_ip;

/// Counts of events read, shared with metrics.
#[derive(Debug, Default)]
pub struct EventStats {
    events: AtomicU64,
    malformed: AtomicU64,
}

impl EventStats {
    /// Sampled over-ceiling events read so far.
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }
    /// Records shorter than a `CeilingEvent` (a program/daemon version mismatch).
    pub fn malformed(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }
}

/// Decodes one ring-buffer record.
pub fn decode(bytes: &[u8]) -> Option<CeilingEvent> {
    if bytes.len() < std::mem::size_of::<CeilingEvent>() {
        return None;
    }
    // SAFETY: the length is checked above; CeilingEvent is repr(C), integer-only (every bit
    // pattern valid) and read unaligned because ring-buffer records carry no alignment promise.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<CeilingEvent>()) })
}

/// Reads events until dropped (the dataplane stops it on its token).
pub async fn run(ring: RingBuf<MapData>, stats: Arc<EventStats>) {
    // SAFETY: the ring owns its map fd, which stays open and unchanged until the AsyncFd
    // (which owns the ring) is dropped.
    let registered = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) };
    let mut fd = match registered {
        Ok(fd) => fd,
        Err(err) => {
            let (_, err) = err.into_parts();
            tracing::warn!(error = %err, "cannot poll the event ring buffer; over-ceiling events are not read");
            return;
        }
    };
    loop {
        let mut guard = match fd.readable_mut().await {
            Ok(g) => g,
            Err(err) => {
                tracing::warn!(error = %err, "event ring buffer poll failed; stopping the reader");
                return;
            }
        };
        let ring = guard.get_inner_mut();
        while let Some(item) = ring.next() {
            match decode(&item) {
                Some(ev) => {
                    stats.events.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(
                        source = %key_ip(&limiter_common::IpKey { addr: ev.addr }),
                        tier = ev.tier,
                        dport = ev.dport,
                        "SYN over the connection ceiling (sampled)"
                    );
                }
                None => {
                    stats.malformed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        guard.clear_ready();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_checks_length() {
        let ev = CeilingEvent {
            addr: [1; 16],
            ts_ns: 7,
            tier: 2,
            dport: 443,
        };
        // SAFETY: reading the bytes of a repr(C) integer-only struct.
        let bytes: [u8; 32] = unsafe { std::mem::transmute(ev) };
        assert_eq!(decode(&bytes), Some(ev));
        assert_eq!(decode(&bytes[..31]), None);
    }
}
