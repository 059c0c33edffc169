//! The open tunnels (upgraded connections, WebSocket mostly): their bounds (`[http]
//! max_tunnels`, total and per identity), their counters for metrics, and, per tunnel, what
//! is needed to close it from outside: a token cancelled when its caller is locked out.
//!
//! A tunnel holds a [`TunnelPermit`] for its whole life; dropping it frees the slot and counts
//! the close under the reason the tunnel recorded.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::{HeaderMap, Method};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::edge::steps::slots::Slots;
use crate::identity::client_ip::Client;

/// Why a tunnel closed (a metrics label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// Either side ended it (close, EOF or a reset).
    Peer,
    /// No byte either way for `tunnel_idle_timeout`.
    Idle,
    /// The shutdown grace period ended.
    Shutdown,
    /// Its caller was locked out.
    Lockout,
}

impl CloseReason {
    pub const ALL: [CloseReason; 4] = [Self::Peer, Self::Idle, Self::Shutdown, Self::Lockout];

    pub fn label(self) -> &'static str {
        match self {
            Self::Peer => "peer",
            Self::Idle => "idle",
            Self::Shutdown => "shutdown",
            Self::Lockout => "lockout",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What a tunnel's caller asked with: enough to ask the decider again whether it is locked out.
#[derive(Debug)]
pub struct Caller {
    pub peer: IpAddr,
    /// Who sent the upgrade request, as resolved when it came in.
    pub client: Client,
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
}

#[derive(Debug)]
struct Open {
    caller: Arc<Caller>,
    kill: CancellationToken,
}

#[derive(Debug)]
pub struct Tunnels {
    /// `max_tunnels`, `max_tunnels_per_identity`.
    slots: Slots,
    open: Mutex<HashMap<u64, Open>>,
    next_id: AtomicU64,
    opened: AtomicU64,
    refused: AtomicU64,
    closed: [AtomicU64; 4],
    /// Every tunnel's task: the proxy's drain waits for them (they end at the grace period).
    pub tasks: TaskTracker,
}

/// One open tunnel's slot.
#[derive(Debug)]
pub struct TunnelPermit {
    tunnels: Arc<Tunnels>,
    identity: String,
    id: u64,
    /// Cancelled when the caller is locked out.
    pub kill: CancellationToken,
    pub reason: CloseReason,
}

impl Tunnels {
    pub fn new(max_total: usize, max_per_identity: usize) -> Arc<Self> {
        Arc::new(Tunnels {
            slots: Slots::new(max_total, max_per_identity),
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            opened: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            closed: Default::default(),
            tasks: TaskTracker::new(),
        })
    }

    /// New bounds (a reload); open tunnels keep their slots.
    pub fn set_bounds(&self, max_total: usize, max_per_identity: usize) {
        self.slots.set_bounds(max_total, max_per_identity);
    }

    /// A slot for `identity`'s new tunnel, or `None` (counted) when a bound is reached.
    pub fn try_open(self: &Arc<Self>, identity: &str, caller: Caller) -> Option<TunnelPermit> {
        if !self.slots.try_take(identity) {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let kill = CancellationToken::new();
        self.open.lock().insert(
            id,
            Open {
                caller: Arc::new(caller),
                kill: kill.clone(),
            },
        );
        self.opened.fetch_add(1, Ordering::Relaxed);
        Some(TunnelPermit {
            tunnels: Arc::clone(self),
            identity: identity.to_owned(),
            id,
            kill,
            reason: CloseReason::Peer,
        })
    }

    /// The callers of the open tunnels, with the token that closes each.
    pub fn callers(&self) -> Vec<(Arc<Caller>, CancellationToken)> {
        self.open
            .lock()
            .values()
            .map(|o| (Arc::clone(&o.caller), o.kill.clone()))
            .collect()
    }

    /// Tunnels open now.
    pub fn open_now(&self) -> usize {
        self.slots.taken()
    }

    /// Tunnels opened since start.
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Upgrades refused `503` because a bound was reached.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Tunnels closed for `reason` since start.
    pub fn closed(&self, reason: CloseReason) -> u64 {
        self.closed[reason.index()].load(Ordering::Relaxed)
    }
}

impl Drop for TunnelPermit {
    fn drop(&mut self) {
        let t = &self.tunnels;
        t.open.lock().remove(&self.id);
        t.slots.give_back(&self.identity);
        t.closed[self.reason.index()].fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller() -> Caller {
        Caller {
            peer: "127.0.0.1".parse().unwrap(),
            client: Client::Addr("127.0.0.1".parse().unwrap()),
            method: Method::GET,
            path: "/".into(),
            headers: HeaderMap::new(),
        }
    }

    #[test]
    fn bounds_total_and_per_identity_and_counts_closes() {
        let t = Tunnels::new(3, 2);
        let a1 = t.try_open("a", caller()).unwrap();
        let _a2 = t.try_open("a", caller()).unwrap();
        assert!(t.try_open("a", caller()).is_none());
        let mut b1 = t.try_open("b", caller()).unwrap();
        assert!(t.try_open("c", caller()).is_none());
        assert_eq!((t.open_now(), t.opened(), t.refused()), (3, 3, 2));
        assert_eq!(t.callers().len(), 3);
        drop(a1);
        b1.reason = CloseReason::Idle;
        drop(b1);
        assert_eq!(t.open_now(), 1);
        assert_eq!(t.closed(CloseReason::Peer), 1);
        assert_eq!(t.closed(CloseReason::Idle), 1);
        assert!(t.try_open("c", caller()).is_some());
    }
}
