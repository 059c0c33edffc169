//! The program's aya-log records (rare events: attach, config errors; never per packet),
//! forwarded into the daemon's `tracing` log under the target `limiter_ebpf`.

use aya::Ebpf;
use aya_log::EbpfLogger;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A `log::Log` that re-emits every record as a tracing event.
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingLog;

impl log::Log for TracingLog {
    fn enabled(&self, _metadata: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let msg = record.args();
        match record.level() {
            log::Level::Error => tracing::error!(target: "limiter_ebpf", "{msg}"),
            log::Level::Warn => tracing::warn!(target: "limiter_ebpf", "{msg}"),
            log::Level::Info => tracing::info!(target: "limiter_ebpf", "{msg}"),
            log::Level::Debug => tracing::debug!(target: "limiter_ebpf", "{msg}"),
            log::Level::Trace => tracing::trace!(target: "limiter_ebpf", "{msg}"),
        }
    }
    fn flush(&self) {}
}

/// Takes the program's log buffer; `None` (with a debug note) when the object has no aya-log.
pub fn take_logger(ebpf: &mut Ebpf) -> Option<EbpfLogger<TracingLog>> {
    match EbpfLogger::init_with_logger(ebpf, TracingLog) {
        Ok(logger) => Some(logger),
        Err(err) => {
            tracing::debug!(error = %err, "the eBPF object has no aya-log buffer; no program logs");
            None
        }
    }
}

/// Forwards records until dropped (the dataplane stops it on its token).
pub async fn run(logger: EbpfLogger<TracingLog>) {
    // SAFETY: the logger owns its map fd, which stays open and unchanged until the AsyncFd
    // (which owns the logger) is dropped.
    let registered = unsafe { AsyncFd::register_with_interest(logger, Interest::READABLE) };
    let mut fd = match registered {
        Ok(fd) => fd,
        Err(err) => {
            let (_, err) = err.into_parts();
            tracing::warn!(error = %err, "cannot poll the eBPF log buffer; program logs are not forwarded");
            return;
        }
    };
    loop {
        match fd.readable_mut().await {
            Ok(mut guard) => {
                guard.get_inner_mut().flush();
                guard.clear_ready();
            }
            Err(err) => {
                tracing::warn!(error = %err, "eBPF log buffer poll failed; stopping the forwarder");
                return;
            }
        }
    }
}
