//! [`DurationHistogram`]: a histogram of durations that records with atomic adds only.
//!
//! prometheus-client's `Histogram` takes a write lock per observation; recorded twice per
//! request from every proxy thread, that lock would be the one cache line all cores fight
//! over. Here each bucket, the count and the sum (in nanoseconds) are separate atomics; a
//! scrape may see an observation's bucket before its count, which Prometheus tolerates
//! (the next scrape is consistent again).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Clones share the same series (registered once, recorded through a kept clone).
#[derive(Clone, Debug)]
pub struct DurationHistogram(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    /// Upper bounds in seconds, ascending; the implicit `+Inf` bucket is last in `counts`.
    bounds: Box<[f64]>,
    /// Observations per bucket (not cumulative), one more than `bounds`.
    counts: Box<[AtomicU64]>,
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl DurationHistogram {
    /// `bounds`: upper bounds in seconds, ascending.
    pub fn new(bounds: &[f64]) -> Self {
        DurationHistogram(Arc::new(Inner {
            bounds: bounds.into(),
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
        }))
    }

    pub fn observe(&self, d: Duration) {
        let h = &*self.0;
        let secs = d.as_secs_f64();
        let i = h.bounds.partition_point(|&b| b < secs);
        if let Some(c) = h.counts.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        h.count.fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        h.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

impl TypedMetric for DurationHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for DurationHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let h = &*self.0;
        // f64::MAX is how prometheus-client spells the `+Inf` bound.
        let buckets: Vec<(f64, u64)> = h
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::MAX))
            .zip(h.counts.iter().map(|c| c.load(Ordering::Relaxed)))
            .collect();
        let sum = h.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, h.count.load(Ordering::Relaxed), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_inclusive_upper_bounds() {
        let h = DurationHistogram::new(&[0.1, 1.0]);
        h.observe(Duration::ZERO);
        h.observe(Duration::from_millis(100));
        h.observe(Duration::from_millis(101));
        h.observe(Duration::from_secs(5));
        let h = &*h.0;
        let counts: Vec<u64> = h.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert_eq!(counts, [2, 1, 1]);
        assert_eq!(h.count.load(Ordering::Relaxed), 4);
        assert_eq!(h.sum_ns.load(Ordering::Relaxed), 5_201_000_000);
    }
}
