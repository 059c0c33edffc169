//! How a store call fails, and the state files a store set aside when it opened.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create state directory {path}")]
    StateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write state file {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read state file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot encode state file {path}")]
    Encode {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("valkey {op}: {message}")]
    Valkey { op: &'static str, message: String },
    /// The remote store is down and `[store] on_failure = "open"`: admit without counting.
    #[error("store unavailable; admitting uncounted (on_failure = \"open\")")]
    Open,
    /// The remote store is down and `[store] on_failure = "closed"`: refuse with a 503.
    #[error("store unavailable; refusing (on_failure = \"closed\")")]
    Closed { retry_after_secs: u64 },
    #[error("API key id {id} already exists")]
    KeyExists { id: String },
}

/// A state file that could not be read at start: reported, set aside, and started without.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorruptFile {
    pub file: PathBuf,
    pub moved_to: PathBuf,
    pub error: String,
}
