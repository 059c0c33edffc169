//! SIGINT and SIGTERM, the causes of a [`Shutdown`](super::shutdown::Shutdown) from outside,
//! SIGHUP, which asks for a config reload, and SIGUSR1, which reopens the access log.

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

/// SIGHUP, which asks for a config reload (systemd's `ExecReload=kill -HUP $MAINPID`). Installed
/// first thing at start like [`ShutdownSignals`]: without a handler SIGHUP's default action
/// kills the process, so one that arrives while the daemon starts must already be caught
/// (it is kept, and served once the reloader exists).
pub struct ReloadSignal {
    hup: tokio::signal::unix::Signal,
}

impl ReloadSignal {
    /// Installs the handler (inside a Tokio runtime).
    pub fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(ReloadSignal {
            hup: signal(SignalKind::hangup()).context("installing the SIGHUP handler")?,
        })
    }

    /// Runs `reload` (on the blocking pool: it reads a file and may write kernel maps) for
    /// every SIGHUP, one at a time, until the process ends.
    pub async fn serve<F>(mut self, reload: F)
    where
        F: Fn() + Send + Sync + 'static,
    {
        let reload = std::sync::Arc::new(reload);
        while self.hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the config");
            let r = std::sync::Arc::clone(&reload);
            if let Err(err) = tokio::task::spawn_blocking(move || r()).await {
                tracing::error!(error = %err, "the reload task failed");
            }
        }
    }
}

/// SIGUSR1, which reopens the access log (logrotate's `postrotate`). Installed first thing at
/// start like [`ReloadSignal`]: SIGUSR1's default action kills the process.
pub struct ReopenSignal {
    usr1: tokio::signal::unix::Signal,
}

impl ReopenSignal {
    /// Installs the handler (inside a Tokio runtime).
    pub fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(ReopenSignal {
            usr1: signal(SignalKind::user_defined1()).context("installing the SIGUSR1 handler")?,
        })
    }

    /// Calls `reopen` for every SIGUSR1 until the process ends (it only raises a flag the
    /// access log's writer reads).
    pub async fn serve(mut self, reopen: impl Fn()) {
        while self.usr1.recv().await.is_some() {
            tracing::info!("SIGUSR1: reopening the access log");
            reopen();
        }
    }
}
