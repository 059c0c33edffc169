//! [`Metrics`]: the registry built once in `run` (namespace from `[metrics] namespace`) and
//! shared by the decider wrapper and the operator listener.

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::registry::Registry;

use super::decisions::DecisionMetrics;
use super::history::History;
use super::negotiate::Format;
use super::reloads::ReloadMetrics;
use super::sources::{HttpSource, KernelSource, SourceCollector, Sources};
use crate::engine::Engine;
use crate::model::Decision;
use crate::proxy::server::HttpServer;

/// Content type of [`Metrics::render`]'s OpenMetrics output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug)]
pub struct Metrics {
    /// Every `<ns>_` metric.
    registry: Registry,
    /// The unprefixed `process_*` metrics.
    process: Registry,
    /// Recorded on the request path.
    pub decisions: DecisionMetrics,
    /// Config reloads and the hash of the file in force.
    pub reloads: ReloadMetrics,
    /// Read at scrape time.
    pub sources: Arc<Sources>,
    /// The last five minutes per caller, for the admin API (not exported to Prometheus:
    /// unbounded labels).
    pub talkers: ObserverSlot,
    /// The last 15 minutes at 5 s, filled by [`super::sampler::run`].
    pub history: History,
    /// Access log lines dropped because the writer could not keep up (`[log] access`).
    pub access_log_dropped: prometheus_client::metrics::counter::Counter,
}

/// Something above this layer that sees every decision with the client's address: the admin
/// API's talker table, which its listener sets when it starts.
pub trait DecisionObserver: Send + Sync {
    fn observe(&self, d: &Decision, addr: IpAddr);
}

/// The [`DecisionObserver`] every decision feeds once one is set (none without an admin API).
#[derive(Default)]
pub struct ObserverSlot(OnceLock<Arc<dyn DecisionObserver>>);

impl ObserverSlot {
    /// The first one set stays.
    pub fn set(&self, observer: Arc<dyn DecisionObserver>) {
        let _ = self.0.set(observer);
    }

    pub fn observe(&self, d: &Decision, addr: IpAddr) {
        if let Some(t) = self.0.get() {
            t.observe(d, addr);
        }
    }
}

impl std::fmt::Debug for ObserverSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "ObserverSlot(set)"
        } else {
            "ObserverSlot(none)"
        })
    }
}

impl Metrics {
    /// Every metric name starts with `namespace` and `_` (validated by the config).
    pub fn new(namespace: &str) -> Arc<Self> {
        let mut registry = Registry::with_prefix(namespace);
        super::build_info::register(&mut registry);
        let decisions = DecisionMetrics::register(&mut registry);
        let reloads = ReloadMetrics::register(&mut registry);
        let sources = Arc::new(Sources::default());
        registry.register_collector(Box::new(SourceCollector(Arc::clone(&sources))));
        registry.register_collector(Box::new(super::tunnels::TunnelCollector(Arc::clone(
            &sources,
        ))));
        registry.register_collector(Box::new(super::h2::H2Collector(Arc::clone(&sources))));
        let access_log_dropped = prometheus_client::metrics::counter::Counter::default();
        registry.register(
            "access_log_dropped",
            "Access log lines dropped because the log could not keep up (a full disk, a slow or blocked file); requests are answered all the same",
            access_log_dropped.clone(),
        );
        let mut process = Registry::default();
        process.register_collector(Box::new(super::process::ProcessCollector));
        Arc::new(Metrics {
            registry,
            process,
            decisions,
            reloads,
            sources,
            talkers: ObserverSlot::default(),
            history: History::default(),
            access_log_dropped,
        })
    }

    /// Held requests and upstream failures from a bound server.
    pub fn attach_http(&self, server: &HttpServer) {
        let _ = self.sources.http.set(HttpSource {
            gate: server.hold_gate(),
            upstream: server.upstream_counters(),
            tunnels: server.tunnels(),
            tls: server.tls(),
            h2: server.h2_counters(),
            overload: server.overload(),
        });
    }

    /// Lockouts active and store state.
    pub fn attach_engine(&self, engine: Arc<Engine>) {
        let _ = self.sources.engine.set(engine);
    }

    /// The kernel dataplane (or its absence).
    pub fn attach_kernel(&self, kernel: KernelSource) {
        let _ = self.sources.kernel.set(kernel);
    }

    /// The OpenMetrics text of every metric, as `/metrics` serves it by default.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let encoded = encode_registry(&mut out, &self.registry)
            .and_then(|()| encode_registry(&mut out, &self.process))
            .and_then(|()| encode_eof(&mut out));
        if let Err(err) = encoded {
            // Only a formatter error can end up here (writing to a String does not fail).
            tracing::error!(error = %err, "cannot encode metrics");
        }
        out
    }

    /// Every metric in `format`, with the content type to answer it under.
    pub fn render_as(&self, format: Format) -> (String, &'static str) {
        match format {
            Format::OpenMetrics => (self.render(), CONTENT_TYPE),
            Format::Text => (
                super::text::from_openmetrics(&self.render()),
                super::text::CONTENT_TYPE,
            ),
        }
    }
}
