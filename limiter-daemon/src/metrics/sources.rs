//! Values read when `/metrics` is scraped, not counted on the request path: held requests and
//! refusals (from the HTTP server's hold gate), upstream failures, lockouts active and store
//! state (from the engine), kernel verdict counters, map fill and events (from the pinned
//! maps).
//!
//! Each source is attached once, when `run` has built it; until then (or when there is none,
//! e.g. no kernel) its series are simply absent, except `kernel_attached`, which is always
//! rendered so a userspace-only daemon is visible.

use std::fmt;
use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::config::kernel::KernelMode;
use crate::edge::steps::hold::HoldGate;
use crate::engine::Engine;
use crate::kernel::events::EventStats;
use crate::kernel::KernelMaps;
use crate::proxy::tunnel::registry::Tunnels;
use crate::proxy::upstream::error::UpstreamCounters;

/// The kernel dataplane as the daemon started it.
#[derive(Clone)]
pub struct KernelSource {
    /// `[kernel] mode` (readiness: `required` must be attached).
    pub mode: KernelMode,
    /// `None`: running userspace-only.
    pub attached: Option<AttachedKernel>,
}

#[derive(Clone)]
pub struct AttachedKernel {
    pub maps: Arc<KernelMaps>,
    pub events: Arc<EventStats>,
    pub interfaces: usize,
}

impl fmt::Debug for KernelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelSource")
            .field("mode", &self.mode)
            .field("attached", &self.attached.is_some())
            .finish()
    }
}

/// The HTTP server's counters.
#[derive(Clone, Debug)]
pub struct HttpSource {
    pub gate: Arc<HoldGate>,
    pub upstream: Arc<UpstreamCounters>,
    pub tunnels: Arc<Tunnels>,
    pub tls: Arc<crate::proxy::tls::TlsCerts>,
    pub h2: Arc<crate::proxy::h2::H2Counters>,
    /// `[overload]` (`None`: off, and its series absent).
    pub overload: Option<Arc<crate::edge::overload::Overload>>,
}

/// Every scrape-time source, each set once.
#[derive(Default)]
pub struct Sources {
    pub http: OnceLock<HttpSource>,
    pub engine: OnceLock<Arc<Engine>>,
    pub kernel: OnceLock<KernelSource>,
}

impl fmt::Debug for Sources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sources")
            .field("http", &self.http.get().is_some())
            .field("engine", &self.engine.get().is_some())
            .field("kernel", &self.kernel.get())
            .finish()
    }
}

/// The registry's view of [`Sources`].
#[derive(Debug)]
pub struct SourceCollector(pub Arc<Sources>);

fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), fmt::Error> {
    let c = ConstCounter::new(value);
    c.encode(enc.encode_descriptor(name, help, None, MetricType::Counter)?)
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: i64,
) -> Result<(), fmt::Error> {
    let g = ConstGauge::new(value);
    g.encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

fn gauge_u(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), fmt::Error> {
    gauge(enc, name, help, i64::try_from(value).unwrap_or(i64::MAX))
}

impl Collector for SourceCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        let s = &self.0;
        if let Some(h) = s.http.get() {
            gauge_u(
                &mut enc,
                "held_requests",
                "Requests held for a scan delay right now",
                h.gate.held() as u64,
            )?;
            counter(
                &mut enc,
                "held_admitted",
                "Delayed requests admitted to be held",
                h.gate.admitted(),
            )?;
            counter(
                &mut enc,
                "held_refused",
                "Delayed requests answered 503 because the hold bound (total or per identity) was reached",
                h.gate.refused(),
            )?;
            let u = &h.upstream;
            let load =
                |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
            let mut fam = enc.encode_descriptor(
                "upstream_errors",
                "Proxy exchanges with the upstream that failed, by kind (unreachable → 502, failed → 502, timeout → 504)",
                None,
                MetricType::Counter,
            )?;
            for (kind, v) in [
                ("unreachable", load(&u.unreachable)),
                ("failed", load(&u.failed)),
                ("timeout", load(&u.timeouts)),
            ] {
                ConstCounter::new(v).encode(fam.encode_family(&[("kind", kind)])?)?;
            }
            counter(
                &mut enc,
                "client_body_errors",
                "Proxied requests whose body the client broke (malformed chunked framing, cut short): answered 400, the upstream exchange aborted",
                load(&u.client_body_errors),
            )?;
            counter(
                &mut enc,
                "upstream_connects",
                "TCP connections opened to the upstream",
                load(&u.connects),
            )?;
            gauge_u(
                &mut enc,
                "upstream_connections_open",
                "Connections to the upstream open now, idle or in use (at most [http] upstream_max_connections per proxy thread)",
                load(&u.open),
            )?;
            gauge_u(
                &mut enc,
                "upstream_connection_waiters",
                "Requests waiting for an upstream connection because the cap is reached",
                load(&u.waiting),
            )?;
            if let Some(o) = &h.overload {
                let mut fam = enc.encode_descriptor(
                    "overload_sheds",
                    "Requests shed (503) because the upstream was at its tier's share of the limit, by tier",
                    None,
                    MetricType::Counter,
                )?;
                for tier in crate::model::Tier::ALL {
                    ConstCounter::new(o.sheds(tier))
                        .encode(fam.encode_family(&[("tier", tier.as_str())])?)?;
                }
                gauge_u(
                    &mut enc,
                    "overload_limit",
                    "Requests the proxy lets reach the upstream at once ([overload] max_inflight, or the adaptive limit now)",
                    u64::from(o.limit()),
                )?;
                gauge_u(
                    &mut enc,
                    "overload_inflight",
                    "Requests in flight to the upstream through the proxy now",
                    u64::from(o.inflight()),
                )?;
            }
        }
        if let Some(engine) = s.engine.get() {
            let store = engine.store();
            gauge(
                &mut enc,
                "store_degraded",
                "1 while the store fails and counting is local (degraded), else 0",
                i64::from(store.degraded()),
            )?;
            counter(
                &mut enc,
                "store_errors",
                "Calls to the remote store (Valkey) that failed; each one is answered locally",
                store.remote_errors(),
            )?;
            gauge_u(
                &mut enc,
                "store_secret_mismatch",
                "Times this host's identity-hashing secret and the shared store's were found to differ (the fleet then counts one caller under two keys until restarted)",
                store.secret_mismatches(),
            )?;
            let unreadable = store.unreadable_counts();
            if !unreadable.is_empty() {
                let mut fam = enc.encode_descriptor(
                    "store_records_unreadable",
                    "Records in the shared store found unreadable (not parsing, or out of bounds) and skipped, by kind; each is logged once with its key or stream ID",
                    None,
                    MetricType::Counter,
                )?;
                for (kind, v) in unreadable {
                    ConstCounter::new(v).encode(fam.encode_family(&[("kind", kind)])?)?;
                }
            }
            if let Some(r) = store.remote_stats() {
                gauge(
                    &mut enc,
                    "store_stream_following",
                    "1 while this host follows the fleet's lockout stream, 0 while the follower fails (other hosts' lockouts do not reach it)",
                    i64::from(store.not_following().is_none()),
                )?;
                counter(
                    &mut enc,
                    "store_remote_decisions",
                    "Counted decisions sent to the shared store (one round trip each)",
                    r.remote_calls,
                )?;
                counter(
                    &mut enc,
                    "store_timeouts",
                    "Decisions the shared store did not answer within [store] decision_timeout (counted locally instead)",
                    r.timeouts,
                )?;
                counter(
                    &mut enc,
                    "store_over_limit_answers",
                    "Decisions answered from the local over-limit cache, without a round trip",
                    r.over_limit_answers,
                )?;
                counter(
                    &mut enc,
                    "store_lease_answers",
                    "Decisions answered from a lease this host held ([store] leases), without a round trip",
                    r.lease_answers,
                )?;
                counter(
                    &mut enc,
                    "store_lease_grants",
                    "Leases the shared store granted this host on a request's round trip",
                    r.lease_grants,
                )?;
                counter(
                    &mut enc,
                    "store_lease_refills",
                    "Leases the shared store granted this host behind the requests (a lease half spent)",
                    r.lease_refills,
                )?;
                counter(
                    &mut enc,
                    "store_lease_give_backs",
                    "Give-backs of units a lease did not spend (expired, or the host stopped), per holder",
                    r.lease_given_back,
                )?;
                counter(
                    &mut enc,
                    "store_lockout_events_applied",
                    "Lockouts and lifts made on other hosts, applied here from the lockout stream",
                    r.events_applied,
                )?;
                gauge_u(
                    &mut enc,
                    "store_lockout_writes_queued",
                    "Lockouts and lifts made here and not yet written to the shared store",
                    r.writes_queued,
                )?;
                counter(
                    &mut enc,
                    "store_lockout_writes_dropped",
                    "Lockout writes dropped because the queue was full while the store was down",
                    r.writes_dropped,
                )?;
            }
            gauge_u(
                &mut enc,
                "store_identities",
                "Identities with counters in the store (this process's view)",
                store.identity_count() as u64,
            )?;
            gauge_u(
                &mut enc,
                "state_files_corrupt",
                "State files that did not parse at start and were set aside (/readyz names them)",
                store.corrupt_files().len() as u64,
            )?;
            match engine.lockouts().list() {
                Ok(list) => gauge_u(
                    &mut enc,
                    "lockouts_active",
                    "Lockouts in force now (store view)",
                    list.len() as u64,
                )?,
                Err(err) => {
                    tracing::debug!(error = %err, "metrics: cannot list lockouts");
                    gauge(
                        &mut enc,
                        "lockouts_active",
                        "Lockouts in force now (store view; -1: the store could not be read)",
                        -1,
                    )?;
                }
            }
        }
        if let Some(engine) = s.engine.get() {
            super::crawlers::encode(&mut enc, engine)?;
        }
        if let Some(k) = s.kernel.get() {
            gauge(
                &mut enc,
                "kernel_attached",
                "1 when the XDP/TC dataplane is loaded and attached, 0 when running userspace-only",
                i64::from(k.attached.is_some()),
            )?;
            if let Some(a) = &k.attached {
                encode_kernel(&mut enc, a)?;
            }
        }
        Ok(())
    }
}

fn encode_kernel(enc: &mut DescriptorEncoder, a: &AttachedKernel) -> Result<(), fmt::Error> {
    gauge_u(
        enc,
        "kernel_interfaces",
        "Interfaces the dataplane is attached to",
        a.interfaces as u64,
    )?;
    counter(
        enc,
        "kernel_events",
        "Over-ceiling events sampled from the kernel ring buffer",
        a.events.events(),
    )?;
    counter(
        enc,
        "kernel_events_malformed",
        "Ring-buffer records too short to decode (program/daemon version mismatch)",
        a.events.malformed(),
    )?;
    match a.maps.counters() {
        Ok(c) => {
            let mut fam = enc.encode_descriptor(
                "kernel_verdicts",
                "Packets by kernel verdict, summed over CPUs",
                None,
                MetricType::Counter,
            )?;
            for (name, v) in c.named() {
                ConstCounter::new(v).encode(fam.encode_family(&[("verdict", name)])?)?;
            }
        }
        Err(err) => tracing::debug!(error = %err, "metrics: cannot read kernel counters"),
    }
    match a.maps.fill() {
        Ok(fill) => {
            let mut fam = enc.encode_descriptor(
                "kernel_map_entries",
                "Entries used in each kernel map that fills up",
                None,
                MetricType::Gauge,
            )?;
            for m in &fill {
                ConstGauge::new(i64::from(m.entries))
                    .encode(fam.encode_family(&[("map", m.name)])?)?;
            }
            let mut fam = enc.encode_descriptor(
                "kernel_map_capacity",
                "Capacity of each kernel map that fills up",
                None,
                MetricType::Gauge,
            )?;
            for m in &fill {
                ConstGauge::new(i64::from(m.capacity))
                    .encode(fam.encode_family(&[("map", m.name)])?)?;
            }
        }
        Err(err) => tracing::debug!(error = %err, "metrics: cannot read kernel map fill"),
    }
    Ok(())
}
