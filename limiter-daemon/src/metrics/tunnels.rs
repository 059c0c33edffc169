//! The proxy's tunnels (upgraded connections, WebSocket) at scrape time: open now, opened,
//! refused at the bound, and closed by reason; and the TLS listeners' handshakes by result.
//! Read from the HTTP server's tunnel registry and certificate set.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::metrics::sources::Sources;
use crate::proxy::tunnel::registry::CloseReason;

/// The registry's view of the tunnel registry in [`Sources`].
#[derive(Debug)]
pub struct TunnelCollector(pub Arc<Sources>);

impl Collector for TunnelCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(h) = self.0.http.get() else {
            return Ok(());
        };
        let t = &h.tunnels;
        ConstGauge::new(i64::try_from(t.open_now()).unwrap_or(i64::MAX)).encode(
            enc.encode_descriptor(
                "tunnels_open",
                "Tunnels (upgraded connections: WebSocket) open now through the proxy",
                None,
                MetricType::Gauge,
            )?,
        )?;
        ConstCounter::new(t.opened()).encode(enc.encode_descriptor(
            "tunnels_opened",
            "Tunnels opened (the upstream answered 101)",
            None,
            MetricType::Counter,
        )?)?;
        ConstCounter::new(t.refused()).encode(enc.encode_descriptor(
            "tunnels_refused",
            "Upgrades answered 503 because [http] max_tunnels or max_tunnels_per_identity was reached",
            None,
            MetricType::Counter,
        )?)?;
        let mut fam = enc.encode_descriptor(
            "tunnels_closed",
            "Tunnels closed, by reason (peer: either side ended it; idle: tunnel_idle_timeout; shutdown: the grace period ended; lockout: its caller was locked out)",
            None,
            MetricType::Counter,
        )?;
        for r in CloseReason::ALL {
            ConstCounter::new(t.closed(r)).encode(fam.encode_family(&[("reason", r.label())])?)?;
        }
        let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let mut fam = enc.encode_descriptor(
            "tls_handshakes",
            "TLS handshakes on the proxy's tls_listen listeners, by result (ok, failed: refused, broken or not done within header_read_timeout)",
            None,
            MetricType::Counter,
        )?;
        for (result, v) in [
            ("ok", load(&h.tls.handshakes)),
            ("failed", load(&h.tls.handshake_failures)),
        ] {
            ConstCounter::new(v).encode(fam.encode_family(&[("result", result)])?)?;
        }
        Ok(())
    }
}
