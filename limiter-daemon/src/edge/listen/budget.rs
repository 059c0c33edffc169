//! How many connections each listener may hold open: the `[http]` caps as written, or, when a
//! cap is not set, a share of the process's descriptor limit (`RLIMIT_NOFILE`, raised to the
//! hard limit at start by `crate::app::nofile`).
//!
//! Every connection is a descriptor, and so is everything else the daemon opens: upstream and
//! store connections, state files, the kernel's maps, the runtime's own. When one listener's
//! clients could take them all, `accept` failed on every listener, `/healthz` stopped
//! answering and the upstream could not be reached (issue 35, D1). The shares:
//!
//! | what | default cap |
//! |---|---|
//! | reserve (store, state files, kernel maps, runtime) | [`RESERVED`] descriptors, never handed to a listener |
//! | the proxy listeners together (`proxy_listen`, `tls_listen`) | half of what is left |
//! | one client address on the proxy listeners | an eighth of the proxy's cap, at most [`PER_CLIENT_MAX`] |
//! | each API, admin, metrics and gRPC listener | a sixteenth of what is left, at most [`PER_LISTENER_MAX`] |
//!
//! What the listeners leave (at least a quarter with four of them) is for the upstream
//! connections the proxy opens (`upstream_max_connections` per thread) and tunnels' upstream
//! sides.

use std::io;
use std::num::NonZeroUsize;

use crate::config::http::HttpSettings;

/// Descriptors kept out of every listener's share.
pub const RESERVED: u64 = 128;
/// The least a listener's share is computed from, however low the limit.
const MIN_FREE: u64 = 64;
/// Ceiling on the derived per-listener cap of the API, admin, metrics and gRPC listeners
/// (their clients are a front end, limiterctl, Prometheus: a handful each).
pub const PER_LISTENER_MAX: usize = 1024;
/// Ceiling on the derived per-client cap: the most a sponsor's kernel ceiling (a burst of
/// 1,000 new connections) lets one address open at once, rounded up.
pub const PER_CLIENT_MAX: usize = 1024;

/// The caps in force, and the limit they were derived from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionBudget {
    /// The soft descriptor limit the caps were derived from.
    pub nofile: u64,
    /// Over all proxy listeners together (`[http] max_connections`).
    pub proxy: NonZeroUsize,
    /// From one client address on the proxy listeners (`[http] max_connections_per_client`).
    pub per_client: NonZeroUsize,
    /// On each API, admin, metrics and gRPC listener (`[http] api_max_connections`).
    pub per_listener: NonZeroUsize,
}

/// The soft `RLIMIT_NOFILE` in force.
pub fn nofile_soft_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into the struct it is given, which outlives it.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(lim.rlim_cur)
}

fn at_least_one(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN)
}

impl ConnectionBudget {
    /// The caps for `s` under a descriptor limit of `nofile` (see the module docs).
    pub fn derive(s: &HttpSettings, nofile: u64) -> Self {
        let free = nofile.saturating_sub(RESERVED).max(MIN_FREE);
        let free = usize::try_from(free).unwrap_or(usize::MAX);
        let proxy = s.max_connections.unwrap_or_else(|| at_least_one(free / 2));
        let per_client = s
            .max_connections_per_client
            .unwrap_or_else(|| at_least_one((proxy.get() / 8).min(PER_CLIENT_MAX)));
        let per_listener = s
            .api_max_connections
            .unwrap_or_else(|| at_least_one((free / 16).min(PER_LISTENER_MAX)));
        ConnectionBudget {
            nofile,
            proxy,
            per_client,
            per_listener,
        }
    }

    /// [`ConnectionBudget::derive`] under the limit in force (1,024 if it cannot be read).
    pub fn for_process(s: &HttpSettings) -> Self {
        ConnectionBudget::derive(s, nofile_soft_limit().unwrap_or(1024))
    }

    /// Descriptors the caps allow at once with the proxy on (`proxy`) and `listeners` API,
    /// admin, metrics and gRPC listeners, the reserve included.
    pub fn committed(&self, proxy: bool, listeners: usize) -> u64 {
        let proxy = if proxy { self.proxy.get() } else { 0 };
        let listeners = listeners.saturating_mul(self.per_listener.get());
        RESERVED
            .saturating_add(u64::try_from(proxy).unwrap_or(u64::MAX))
            .saturating_add(u64::try_from(listeners).unwrap_or(u64::MAX))
    }

    /// Logs the caps; warns when caps set in the file let the listeners use more descriptors
    /// than the limit holds (then `accept` fails before a cap is reached).
    pub fn log(&self, proxy: bool, listeners: usize) {
        tracing::info!(
            descriptor_limit = self.nofile,
            proxy = self.proxy.get(),
            per_client = self.per_client.get(),
            per_listener = self.per_listener.get(),
            "connection caps: the proxy listeners together, one client address on them, each \
             API/admin/metrics/gRPC listener"
        );
        let committed = self.committed(proxy, listeners);
        if committed > self.nofile {
            tracing::warn!(
                descriptor_limit = self.nofile,
                committed,
                "the connection caps allow more descriptors than the limit: raise LimitNOFILE \
                 (or the hard `ulimit -n`), or lower http.max_connections / \
                 http.api_max_connections"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_caps_leave_descriptors_for_the_rest() {
        let s = HttpSettings::default();
        let b = ConnectionBudget::derive(&s, 1024);
        assert_eq!(b.proxy.get(), 448);
        assert_eq!(b.per_client.get(), 56);
        assert_eq!(b.per_listener.get(), 56);
        // Proxy, API, admin, metrics and gRPC all full: a quarter of the free share is left.
        assert!(b.committed(true, 4) <= 1024 - 896 / 4, "{b:?}");
        let big = ConnectionBudget::derive(&s, 65_536);
        assert_eq!(big.proxy.get(), 32_704);
        assert_eq!(big.per_client.get(), PER_CLIENT_MAX);
        assert_eq!(big.per_listener.get(), PER_LISTENER_MAX);
        // However low the limit, every cap is at least one.
        let tiny = ConnectionBudget::derive(&s, 10);
        assert!(tiny.proxy.get() >= 1 && tiny.per_client.get() >= 1);
    }

    #[test]
    fn caps_set_in_the_file_win() {
        let s = HttpSettings::from_toml(
            "max_connections = 10\nmax_connections_per_client = 3\napi_max_connections = 5",
        )
        .unwrap();
        let b = ConnectionBudget::derive(&s, 1_000_000);
        assert_eq!(
            (b.proxy.get(), b.per_client.get(), b.per_listener.get()),
            (10, 3, 5)
        );
        // The per-client share follows an explicit proxy cap.
        let s = HttpSettings::from_toml("max_connections = 80").unwrap();
        assert_eq!(ConnectionBudget::derive(&s, 1_000_000).per_client.get(), 10);
        let over = HttpSettings::from_toml("max_connections = 5000").unwrap();
        assert!(ConnectionBudget::derive(&over, 1024).committed(true, 0) > 1024);
    }
}
