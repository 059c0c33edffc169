//! SIGINT and SIGTERM, the causes of a [`Shutdown`](super::shutdown::Shutdown) from outside.

use anyhow::Context as _;

/// SIGINT and SIGTERM, caught from the moment [`ShutdownSignals::install`] returns: installed
/// first thing at start, so a signal that arrives while the daemon attaches or binds stops it
/// cleanly instead of killing it with the default action.
pub struct ShutdownSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    /// Installs the handlers (inside a Tokio runtime).
    pub fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(ShutdownSignals {
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    /// Resolves on the first SIGINT or SIGTERM since [`ShutdownSignals::install`].
    pub async fn recv(mut self) {
        tokio::select! {
            _ = self.term.recv() => tracing::info!("SIGTERM"),
            _ = self.int.recv() => tracing::info!("SIGINT"),
        }
    }
}
