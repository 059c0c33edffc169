//! What can stop a replay: a config that does not validate, a log that cannot be opened, or
//! one that cannot be read to its end (the report of what was read is printed first). A bad
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
    /// The report was printed, but covers only the lines before `after_line`'s successor
    /// (a truncated gzip, an I/O error): a distinct exit code, so a script does not take a
    /// partial report for a whole one.
    #[error("log {file} could not be read past line {after_line} ({error}); the report printed covers the lines before it")]
    CutShort {
        file: String,
        after_line: u64,
        error: String,
    },
    #[error("cannot write the report")]
    Write(#[source] std::io::Error),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}
