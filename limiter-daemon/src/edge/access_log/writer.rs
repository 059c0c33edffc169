//! The writer thread: takes finished lines off the channel, formats each into one reused
//! buffer, and writes them through a buffered file, flushed whenever the channel runs empty
//! (so a quiet daemon's lines reach the file at once, and a busy one's in large writes).
//!
//! The file is opened at start, its directory created when missing, so a path the daemon
//! cannot write stops it with the reason instead of losing every line quietly. `SIGUSR1`
//! ([`super::AccessLog::reopen`]) makes the writer reopen the path before its next line, or
//! within [`IDLE_CHECK`] when none comes: logrotate's `postrotate`. A thread, not a task: a
//! blocked write (a full disk, a FIFO nobody reads) stalls this thread alone; the request side
//! never waits for it.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use super::format;
use super::handle::{AccessLog, Shared};
use super::record::Record;
use crate::config::log::{AccessFormat, AccessTarget};

/// Lines waiting for the writer before new ones are dropped. A test may shrink it with
/// `LIMITER_TEST_ACCESS_LOG_QUEUE` to see drops after a few requests.
const QUEUE: usize = 8192;
/// How often an idle writer looks for a reopen request.
pub const IDLE_CHECK: Duration = Duration::from_millis(200);
/// The file buffer: one write per this much under load.
const FILE_BUFFER: usize = 64 * 1024;

/// Why the access log cannot start.
#[derive(Debug, thiserror::Error)]
pub enum AccessLogError {
    #[error(
        "cannot create the access log's directory {dir} ([log] access); create it writable by \
         the daemon (under systemd: LogsDirectory=limiter), or set [log] access = \"\" to turn \
         the access log off"
    )]
    Directory {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot open the access log {path} for appending ([log] access); make it writable by \
         the daemon (under systemd: LogsDirectory=limiter or ReadWritePaths=), or set \
         [log] access = \"\" to turn it off"
    )]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot start the access log's writer thread")]
    Thread(#[source] io::Error),
}

/// Opens `target` and starts the writer; `dropped` counts lines dropped. `Off` gives a
/// handle that does nothing.
pub fn start(
    target: &AccessTarget,
    format: AccessFormat,
    dropped: Counter,
) -> Result<AccessLog, AccessLogError> {
    let sink = match target {
        AccessTarget::Off => return Ok(AccessLog::off()),
        AccessTarget::Stdout => Sink::Stdout(BufWriter::with_capacity(FILE_BUFFER, io::stdout())),
        AccessTarget::File(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|source| AccessLogError::Directory {
                    dir: dir.to_path_buf(),
                    source,
                })?;
            }
            Sink::File {
                path: path.clone(),
                file: BufWriter::with_capacity(FILE_BUFFER, open(path)?),
            }
        }
    };
    let queue = std::env::var("LIMITER_TEST_ACCESS_LOG_QUEUE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(QUEUE);
    let (tx, rx) = sync_channel(queue);
    let shared = Arc::new(Shared::new(dropped));
    let writer = Writer {
        rx,
        sink,
        format,
        shared: Arc::clone(&shared),
        buf: Vec::with_capacity(1024),
    };
    std::thread::Builder::new()
        .name("limiter-access-log".into())
        .spawn(move || writer.run())
        .map_err(AccessLogError::Thread)?;
    match target {
        AccessTarget::File(path) => {
            tracing::info!(path = %path.display(), ?format, "access log open")
        }
        _ => tracing::info!(?format, "access log on standard output"),
    }
    Ok(AccessLog::new(tx, shared))
}

/// Opens `path` for appending (mode 0640 when created). Opened without blocking, so a FIFO
/// with no reader is refused at once instead of hanging the start; writes then block as
/// usual, on the writer thread alone.
fn open(path: &Path) -> Result<File, AccessLogError> {
    let err = |source| AccessLogError::Open {
        path: path.to_path_buf(),
        source,
    };
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(err)?;
    use std::os::fd::AsRawFd as _;
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is open for the life of `file`; F_GETFL/F_SETFL touch only its flags.
    let ok = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
    };
    if !ok {
        return Err(err(io::Error::last_os_error()));
    }
    Ok(file)
}

enum Sink {
    Stdout(BufWriter<io::Stdout>),
    File {
        path: PathBuf,
        file: BufWriter<File>,
    },
}

impl Sink {
    fn out(&mut self) -> &mut dyn Write {
        match self {
            Sink::Stdout(w) => w,
            Sink::File { file, .. } => file,
        }
    }

    /// Reopens the file at its path (a rotated one was moved away); keeps the old one when the
    /// path cannot be opened.
    fn reopen(&mut self) {
        let Sink::File { path, file } = self else {
            return;
        };
        if let Err(err) = file.flush() {
            tracing::warn!(error = %err, "access log: flushing before the reopen failed");
        }
        match open(path) {
            Ok(f) => {
                *file = BufWriter::with_capacity(FILE_BUFFER, f);
                tracing::info!(path = %path.display(), "access log reopened");
            }
            Err(err) => tracing::warn!(
                error = %format!("{err:#}"),
                "access log: cannot reopen; writing on to the file already open"
            ),
        }
    }
}

struct Writer {
    rx: Receiver<Box<Record>>,
    sink: Sink,
    format: AccessFormat,
    shared: Arc<Shared>,
    buf: Vec<u8>,
}

impl Writer {
    /// Until every handle is gone.
    fn run(mut self) {
        loop {
            self.reopen_if_asked();
            let first = match self.rx.recv_timeout(IDLE_CHECK) {
                Ok(r) => r,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            self.write(&first);
            // Whatever else is waiting goes out in the same flush.
            while let Ok(r) = self.rx.try_recv() {
                self.reopen_if_asked();
                self.write(&r);
            }
            if let Err(err) = self.sink.out().flush() {
                self.shared
                    .drop_lines(0, &format!("writing the access log failed: {err}"));
            }
        }
        let _ = self.sink.out().flush();
    }

    fn reopen_if_asked(&mut self) {
        if self.shared.reopen.swap(false, Ordering::AcqRel) {
            self.sink.reopen();
        }
    }

    fn write(&mut self, r: &Record) {
        self.buf.clear();
        format::line(self.format, r, &mut self.buf);
        if let Err(err) = self.sink.out().write_all(&self.buf) {
            self.shared
                .drop_lines(1, &format!("writing the access log failed: {err}"));
        }
    }
}
