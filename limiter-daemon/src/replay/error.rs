//! What can stop a replay: a config that does not validate, a log that cannot be read. A bad
//! line never does (it is counted and reported instead).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("cannot open log {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read log {path} after line {}", line.saturating_sub(1))]
    Read {
        path: PathBuf,
        /// The line being read.
        line: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the report")]
    Write(#[source] std::io::Error),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}
