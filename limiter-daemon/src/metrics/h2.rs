//! The proxy's HTTP/2 streams at scrape time: streams served, streams the client reset
//! (RST_STREAM frames: rapid reset shows here first) and connections closed for abuse. Read
//! from the HTTP server's counters.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;

use crate::metrics::sources::Sources;

/// The registry's view of the HTTP/2 counters in [`Sources`].
#[derive(Debug)]
pub struct H2Collector(pub Arc<Sources>);

impl Collector for H2Collector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(h) = self.0.http.get() else {
            return Ok(());
        };
        ConstCounter::new(h.h2.streams.load(Ordering::Relaxed)).encode(enc.encode_descriptor(
            "h2_streams",
            "HTTP/2 streams (requests) received on the proxy listeners",
            None,
            MetricType::Counter,
        )?)?;
        ConstCounter::new(h.h2.resets.load(Ordering::Relaxed)).encode(enc.encode_descriptor(
            "h2_stream_resets",
            "RST_STREAM frames received from HTTP/2 clients on the proxy listeners",
            None,
            MetricType::Counter,
        )?)?;
        ConstCounter::new(h.h2.abuse_closes.load(Ordering::Relaxed)).encode(
            enc.encode_descriptor(
                "h2_abuse_closes",
                "HTTP/2 connections closed for abuse (rapid reset, CONTINUATION, DATA or control frame floods); each strikes its caller",
                None,
                MetricType::Counter,
            )?,
        )?;
        Ok(())
    }
}
