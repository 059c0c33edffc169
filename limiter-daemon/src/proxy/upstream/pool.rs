//! One proxy thread's connections to the upstream: the cap on how many are open at once
//! (`[http] upstream_max_connections`), the idle ones kept for reuse, and the queue of requests
//! waiting for one.
//!
//! Why a cap: releasing 6,000 held requests at once opened 5,648 upstream connections, which
//! an app sized for its usual load may not survive. Past the cap a request waits, in arrival
//! order, for whichever comes first: a connection its exchange is done with (handed over
//! directly, so a busy pool is reused rather than closed and reopened, which would leave a
//! `TIME_WAIT` socket per exchange) or the slot of one that closed. The wait is part of the
//! exchange, so the response timeout (504) bounds it.
//!
//! Both client paths draw from one cap: the direct path's connections and hyper's. A
//! connection of one kind is never handed to a waiter for the other; it is closed instead and
//! its slot handed on, so a pool full of idle connections of one kind cannot starve the other.
//!
//! Invariants, all under the one lock: `open` counts every slot handed out and not yet
//! released (at most `cap`); a waiter exists only while `open == cap`; while one exists, no
//! connection is left idle (a connection given back goes to it, or closes to free its slot).
//! Connections are dropped outside the lock: dropping one releases its slot, which takes it.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::proxy::upstream::error::UpstreamCounters;

/// Which client path a connection belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Direct,
    Hyper,
}

impl Kind {
    fn index(self) -> usize {
        match self {
            Kind::Direct => 0,
            Kind::Hyper => 1,
        }
    }
}

/// A connection the pool can keep.
pub(crate) trait Pooled: Send + 'static {
    fn kind(&self) -> Kind;
    /// Whether it can carry another exchange (the upstream has not closed it, …).
    fn reusable(&self) -> bool;
}

/// Leave to open one connection: whoever holds it holds one place under the cap, given back
/// when it is dropped. A connection carries its slot for as long as it is open.
pub(crate) struct Slot {
    pool: Option<Arc<dyn Release>>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Slot")
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.release();
        }
    }
}

trait Release: Send + Sync {
    fn release(self: Arc<Self>);
}

/// What a checkout gets.
pub(crate) enum Grant<C> {
    /// A connection of the kind asked for, idle or just done with an exchange.
    Conn(C),
    /// Leave to open a new one.
    Slot(Slot),
}

struct Waiter<C> {
    kind: Kind,
    tx: oneshot::Sender<Grant<C>>,
}

struct State<C> {
    /// Idle connections by [`Kind::index`], the most recently used last.
    idle: [Vec<(C, Instant)>; 2],
    open: usize,
    waiters: VecDeque<Waiter<C>>,
}

pub(crate) struct Pool<C> {
    state: Mutex<State<C>>,
    cap: usize,
    max_idle: usize,
    idle_timeout: Duration,
    /// `open` and `waiting` summed over every thread's pool, for metrics.
    counters: Arc<UpstreamCounters>,
}

/// The pool was dropped while a request waited in it (cannot happen while the upstream it
/// belongs to is in use).
#[derive(Debug, thiserror::Error)]
#[error("the upstream connection pool is gone")]
pub(crate) struct PoolGone;

/// Counts a request as waiting while it exists.
struct Waiting<'a>(&'a UpstreamCounters);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<C: Pooled> Pool<C> {
    pub(crate) fn new(
        cap: usize,
        max_idle: usize,
        idle_timeout: Duration,
        counters: Arc<UpstreamCounters>,
    ) -> Arc<Self> {
        Arc::new(Pool {
            state: Mutex::new(State {
                idle: [Vec::new(), Vec::new()],
                open: 0,
                waiters: VecDeque::new(),
            }),
            cap: cap.max(1),
            max_idle,
            idle_timeout,
            counters,
        })
    }

    fn slot(self: &Arc<Self>) -> Slot {
        Slot {
            pool: Some(Arc::clone(self) as Arc<dyn Release>),
        }
    }

    /// Connections open now (idle or in use) and requests waiting for one.
    pub(crate) fn load(&self) -> (usize, usize) {
        let st = self.state.lock();
        (st.open, st.waiters.len())
    }

    /// Idle connections kept now.
    pub(crate) fn idle(&self) -> usize {
        let st = self.state.lock();
        st.idle.iter().map(Vec::len).sum()
    }

    /// A connection of `kind` (an idle one when `reuse` and one is fresh), or leave to open
    /// one, waiting in line when the cap is reached.
    pub(crate) async fn checkout(
        self: &Arc<Self>,
        kind: Kind,
        reuse: bool,
    ) -> Result<Grant<C>, PoolGone> {
        let rx = loop {
            let mut stale = Vec::new();
            let mut evicted = None;
            let rx = {
                let mut st = self.state.lock();
                let mut found = None;
                while reuse && found.is_none() {
                    let Some((conn, since)) = st.idle[kind.index()].pop() else {
                        break;
                    };
                    if since.elapsed() < self.idle_timeout && conn.reusable() {
                        found = Some(conn);
                    } else {
                        stale.push(conn);
                    }
                }
                if let Some(conn) = found {
                    drop(st);
                    drop(stale);
                    return Ok(Grant::Conn(conn));
                }
                if !stale.is_empty() {
                    // Closing them frees their slots (outside the lock); then look again.
                    None
                } else if st.open < self.cap {
                    st.open += 1;
                    self.counters.open.fetch_add(1, Ordering::Relaxed);
                    return Ok(Grant::Slot(self.slot()));
                } else {
                    // An idle connection of the other kind gives its slot up for this request.
                    evicted = st.idle[1 - kind.index()].pop();
                    let (tx, rx) = oneshot::channel();
                    st.waiters.push_back(Waiter { kind, tx });
                    Some(rx)
                }
            };
            drop(stale);
            drop(evicted);
            if let Some(rx) = rx {
                break rx;
            }
        };
        self.counters.waiting.fetch_add(1, Ordering::Relaxed);
        let _waiting = Waiting(&self.counters);
        rx.await.map_err(|_| PoolGone)
    }

    /// Takes back a connection done with its exchange: to the first waiter, to the idle list,
    /// or closed.
    pub(crate) fn put_back(self: &Arc<Self>, mut conn: C) {
        let kind = conn.kind();
        let mut st = self.state.lock();
        loop {
            let Some(w) = st.waiters.pop_front() else {
                if st.idle[kind.index()].len() < self.max_idle {
                    st.idle[kind.index()].push((conn, Instant::now()));
                    return;
                }
                break;
            };
            if w.tx.is_closed() {
                continue;
            }
            if w.kind != kind {
                // Closed below; its slot goes to this waiter, still first in line.
                st.waiters.push_front(w);
                break;
            }
            match w.tx.send(Grant::Conn(conn)) {
                Ok(()) => return,
                // It gave up just now: try the next one.
                Err(Grant::Conn(c)) => conn = c,
                Err(Grant::Slot(_)) => unreachable!("sent a connection"),
            }
        }
        drop(st);
        drop(conn);
    }
}

impl<C: Pooled> Release for Pool<C> {
    fn release(self: Arc<Self>) {
        let mut st = self.state.lock();
        while let Some(w) = st.waiters.pop_front() {
            if w.tx.is_closed() {
                continue;
            }
            match w.tx.send(Grant::Slot(self.slot())) {
                Ok(()) => return,
                // Not taken: no place was given out, so none is given back.
                Err(Grant::Slot(mut s)) => s.pool = None,
                Err(Grant::Conn(_)) => unreachable!("sent a slot"),
            }
        }
        st.open -= 1;
        self.counters.open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in connection: its slot, and whether it may be reused.
    struct Fake {
        kind: Kind,
        _slot: Slot,
        ok: bool,
    }

    impl Pooled for Fake {
        fn kind(&self) -> Kind {
            self.kind
        }
        fn reusable(&self) -> bool {
            self.ok
        }
    }

    fn pool(cap: usize) -> Arc<Pool<Fake>> {
        Pool::new(cap, 8, Duration::from_secs(60), Arc::default())
    }

    fn opened(kind: Kind, g: Grant<Fake>) -> Fake {
        match g {
            Grant::Slot(slot) => Fake {
                kind,
                _slot: slot,
                ok: true,
            },
            Grant::Conn(c) => c,
        }
    }

    #[tokio::test]
    async fn waiters_are_served_in_order_by_hand_over_then_by_freed_slots() {
        let p = pool(2);
        let a = opened(Kind::Direct, p.checkout(Kind::Direct, true).await.unwrap());
        let b = opened(Kind::Direct, p.checkout(Kind::Direct, true).await.unwrap());
        assert_eq!(p.load(), (2, 0));
        let p1 = Arc::clone(&p);
        let first = tokio::spawn(async move { p1.checkout(Kind::Direct, true).await });
        let p2 = Arc::clone(&p);
        let second = tokio::spawn(async move { p2.checkout(Kind::Direct, true).await });
        while p.load().1 < 2 {
            tokio::task::yield_now().await;
        }
        // A connection given back goes straight to the first waiter, reused, not reopened.
        p.put_back(a);
        let first = first.await.unwrap();
        assert!(matches!(first, Ok(Grant::Conn(_))));
        // A closed one frees its slot for the next.
        drop(b);
        let second = second.await.unwrap();
        assert!(matches!(second, Ok(Grant::Slot(_))));
        assert_eq!(p.load(), (2, 0), "slots moved, none added");
        drop((first, second));
        assert_eq!(p.load(), (0, 0));
    }

    #[tokio::test]
    async fn a_waiter_that_gave_up_is_skipped_and_the_count_stays_exact() {
        let p = pool(1);
        let a = opened(Kind::Direct, p.checkout(Kind::Direct, true).await.unwrap());
        let gave_up =
            tokio::time::timeout(Duration::from_millis(1), p.checkout(Kind::Direct, true));
        assert!(gave_up.await.is_err());
        drop(a);
        assert_eq!(p.load(), (0, 0));
        assert!(matches!(
            p.checkout(Kind::Direct, true).await,
            Ok(Grant::Slot(_))
        ));
    }

    #[tokio::test]
    async fn idle_connections_of_the_other_kind_give_their_slot_up() {
        let p = pool(1);
        let a = opened(Kind::Direct, p.checkout(Kind::Direct, true).await.unwrap());
        p.put_back(a);
        assert_eq!(p.idle(), 1);
        let got = tokio::time::timeout(Duration::from_secs(5), p.checkout(Kind::Hyper, true))
            .await
            .expect("not starved by an idle direct connection");
        assert!(matches!(got, Ok(Grant::Slot(_))));
        assert_eq!(p.idle(), 0);
    }

    #[tokio::test]
    async fn stale_idle_connections_are_closed_not_reused() {
        let p = pool(1);
        let mut a = opened(Kind::Direct, p.checkout(Kind::Direct, true).await.unwrap());
        a.ok = false;
        p.put_back(a);
        assert!(matches!(
            p.checkout(Kind::Direct, true).await,
            Ok(Grant::Slot(_))
        ));
    }
}
