//! One way for background work to end: a [`Shutdown`] holds a cancellation token (the
//! broadcast "stop") and a task tracker (the "everything stopped" half), and is cloned into
//! every task `run` starts. Nothing else decides how a task ends.
//!
//! Layers below `app` never name this type: they take a plain
//! [`tokio_util::sync::CancellationToken`] (from [`Shutdown::token`]) or a shutdown future
//! (from [`Shutdown::cancelled`]), so their tests pass their own.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tokio_util::task::task_tracker::TaskTrackerToken;
use tokio_util::task::TaskTracker;

/// Cheap to clone: every clone sees the same stop and joins the same set of tasks.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Shutdown {
    pub fn new() -> Self {
        Shutdown::default()
    }

    /// Asks every task to stop. Idempotent.
    pub fn trigger(&self) {
        self.stop.cancel();
    }

    /// Whether [`Shutdown::trigger`] was called.
    pub fn is_triggered(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Resolves once stop is triggered; owns what it needs, so it can be handed to a spawned
    /// task or to a server's `run(shutdown)`.
    pub fn cancelled(&self) -> WaitForCancellationFutureOwned {
        self.stop.clone().cancelled_owned()
    }

    /// A token cancelled with this shutdown, for layers below `app` (cancelling the child
    /// does not stop anything else).
    pub fn token(&self) -> CancellationToken {
        self.stop.child_token()
    }

    /// Spawns `task` on the current runtime, tracked: [`Shutdown::wait_drained`] waits for
    /// it. The task itself watches [`Shutdown::cancelled`] (a server's graceful stop).
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tasks.spawn(task)
    }

    /// Keeps [`Shutdown::wait_drained`] waiting while alive: for background work that is a
    /// thread, not a task (the key cache's refresher), which drops it when it has ended.
    pub fn hold(&self) -> TaskTrackerToken {
        self.tasks.token()
    }

    /// Spawns `task`, tracked, and drops it at stop: for loops with nothing to finish.
    pub fn spawn_until<F>(&self, task: F) -> tokio::task::JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let stop = self.cancelled();
        self.tasks.spawn(async move {
            tokio::select! {
                () = stop => {}
                () = task => {}
            }
        })
    }

    /// Triggers stop when `cause` resolves (a signal, say), unless stop came first.
    pub fn trigger_on<F>(&self, cause: F) -> tokio::task::JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let me = self.clone();
        self.spawn_until(async move {
            cause.await;
            me.trigger();
        })
    }

    /// Triggers stop, then waits up to `grace` for every tracked task to end. Returns whether
    /// they all did (tasks still running are left to the runtime's end).
    pub async fn wait_drained(&self, grace: Duration) -> bool {
        self.trigger();
        self.tasks.close();
        let drained = tokio::time::timeout(grace, self.tasks.wait()).await.is_ok();
        if !drained {
            tracing::warn!(
                running = self.tasks.len(),
                "background tasks still running after the shutdown grace; dropping them"
            );
        }
        drained
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn trigger_reaches_every_clone_and_child() {
        let s = Shutdown::new();
        let child = s.token();
        let waiting = s.spawn(s.clone().cancelled());
        let looping = s.spawn_until(std::future::pending());
        assert!(!s.is_triggered());
        s.clone().trigger();
        assert!(child.is_cancelled());
        waiting.await.unwrap();
        looping.await.unwrap();
        assert!(s.wait_drained(Duration::from_secs(1)).await);
    }

    #[tokio::test(start_paused = true)]
    async fn trigger_on_fires_once_its_cause_resolves() {
        let s = Shutdown::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        s.trigger_on(async move {
            let _ = rx.await;
        });
        tokio::task::yield_now().await;
        assert!(!s.is_triggered());
        tx.send(()).unwrap();
        s.cancelled().await;
        assert!(s.is_triggered());
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_keeps_the_drain_waiting_until_it_drops() {
        let s = Shutdown::new();
        let hold = s.hold();
        assert!(!s.wait_drained(Duration::from_secs(5)).await);
        drop(hold);
        assert!(s.wait_drained(Duration::from_secs(5)).await);
    }

    #[tokio::test(start_paused = true)]
    async fn drain_is_bounded_by_the_grace() {
        let s = Shutdown::new();
        // Ignores stop: only the grace ends the wait.
        s.spawn(std::future::pending::<()>());
        assert!(!s.wait_drained(Duration::from_secs(5)).await);
        assert!(s.is_triggered());
    }
}
