//! [`Metrics`]: the registry built once in `run` (namespace from `[metrics] namespace`) and
//! shared by the decider wrapper and the operator listener.

use std::sync::Arc;

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::registry::Registry;

use super::decisions::DecisionMetrics;
use super::history::History;
use super::negotiate::Format;
use super::reloads::ReloadMetrics;
use super::sources::{HttpSource, KernelSource, SourceCollector, Sources};
use super::talkers::Talkers;
use crate::engine::Engine;
use crate::http::proxy::server::HttpServer;

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
    /// The last five minutes per caller (not exported to Prometheus: unbounded labels).
    pub talkers: Talkers,
    /// The last 15 minutes at 5 s, filled by [`super::sampler::run`].
    pub history: History,
    /// Access log lines dropped because the writer could not keep up (`[log] access`).
    pub access_log_dropped: prometheus_client::metrics::counter::Counter,
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
            talkers: Talkers::default(),
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
