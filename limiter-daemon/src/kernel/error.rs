//! The kernel bridge's error type: one enum for loading, attaching, pinning and map operations.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error(
        "this binary was built with LIMITER_EBPF_BUILD=skip and carries no eBPF object; \
         point LIMITER_EBPF_OBJECT at one (`cargo xtask build-ebpf` builds it) or rebuild without the variable"
    )]
    ObjectNotEmbedded,

    #[error("LIMITER_EBPF_OBJECT={path} does not exist; run `cargo xtask build-ebpf` or fix the variable")]
    ObjectEnvMissing { path: PathBuf },

    #[error("loading the eBPF object ({object}){hint}")]
    Load {
        object: String,
        /// Extra advice (e.g. stale pins from an incompatible build).
        hint: String,
        #[source]
        source: Box<aya::EbpfError>,
    },

    #[error("the eBPF object has no program named `{name}`")]
    ProgramMissing { name: &'static str },

    #[error("{what} program `{name}`")]
    Program {
        what: &'static str,
        name: &'static str,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },

    #[error("attaching to interface {iface} in mode {mode}")]
    Attach {
        iface: String,
        mode: &'static str,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },

    #[error("interface {iface}: the kernel returned a link that cannot be pinned (needs bpf_link support for {mode})")]
    NotPinnable { iface: String, mode: &'static str },

    #[error("pinned link {path}")]
    Link {
        path: PathBuf,
        #[source]
        source: Box<aya::programs::links::LinkError>,
    },

    #[error("pinning {path}")]
    Pin {
        path: PathBuf,
        #[source]
        source: Box<aya::pin::PinError>,
    },

    #[error("no limiter maps pinned under {path} (is the daemon attached with this --pin-path?)")]
    NotPinned { path: PathBuf },

    #[error("map {name} pinned at {path}")]
    OpenMap {
        name: &'static str,
        path: PathBuf,
        #[source]
        source: Box<aya::maps::MapError>,
    },

    #[error("{op} on map {name}")]
    MapOp {
        op: &'static str,
        name: &'static str,
        #[source]
        source: Box<aya::maps::MapError>,
    },

    #[error("map {name} is full ({capacity} entries)")]
    MapFull { name: &'static str, capacity: u32 },

    #[error("{path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("kernel.interfaces is empty: name at least one interface to attach to (or --iface)")]
    NoInterfaces,

    #[error("reading CLOCK_BOOTTIME")]
    Clock(#[source] std::io::Error),
}

impl KernelError {
    pub(crate) fn map_op(
        op: &'static str,
        name: &'static str,
        source: aya::maps::MapError,
    ) -> Self {
        KernelError::MapOp {
            op,
            name,
            source: Box::new(source),
        }
    }
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        KernelError::Io {
            path: path.into(),
            source,
        }
    }
}

/// True when a map operation failed only because the key is absent.
pub(crate) fn is_not_found(err: &aya::maps::MapError) -> bool {
    match err {
        aya::maps::MapError::KeyNotFound | aya::maps::MapError::ElementNotFound => true,
        aya::maps::MapError::SyscallError(e) => e.io_error.raw_os_error() == Some(libc::ENOENT),
        _ => false,
    }
}

/// True when a map update failed because the map has no room left.
pub(crate) fn is_full(err: &aya::maps::MapError) -> bool {
    match err {
        aya::maps::MapError::SyscallError(e) => e.io_error.raw_os_error() == Some(libc::E2BIG),
        _ => false,
    }
}

/// Renders an error with its sources, `a: b: c` (tracing's `%err` shows only the first).
pub fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut s = err.to_string();
    let mut src = err.source();
    while let Some(e) = src {
        s.push_str(": ");
        s.push_str(&e.to_string());
        src = e.source();
    }
    s
}
