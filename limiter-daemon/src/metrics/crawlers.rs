//! The crawler rung's scrape-time series, read from the engine: the published ranges in
//! force and their re-reads, the fetched proof sources (`range_urls`, `asn_url`: fetches by
//! outcome, entries in force, age of the data in force), and the reverse-DNS lookups (per-decision counts of verified and
//! fake crawlers are in [`super::decisions`]).

use std::fmt;
use std::sync::atomic::Ordering;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::engine::Engine;
use crate::fetch::proof_sources::FetchOutcome;

pub fn encode(enc: &mut DescriptorEncoder, engine: &Engine) -> Result<(), fmt::Error> {
    let (reloads, dns, (cached, in_flight)) = engine.crawler_stats();
    let gauge = |enc: &mut DescriptorEncoder, name: &str, help: &str, v: usize| {
        ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)).encode(enc.encode_descriptor(
            name,
            help,
            None,
            MetricType::Gauge,
        )?)
    };
    gauge(
        enc,
        "crawler_range_prefixes",
        "Prefixes of the published crawler range files in force",
        engine.crawler_prefixes(),
    )?;
    let mut fam = enc.encode_descriptor(
        "crawler_range_reloads",
        "Range files re-read after they changed on disk, by result (refused: the file does not load; the previous ranges stay)",
        None,
        MetricType::Counter,
    )?;
    for (result, v) in [
        ("applied", reloads.applied.load(Ordering::Relaxed)),
        ("refused", reloads.failed.load(Ordering::Relaxed)),
    ] {
        ConstCounter::new(v).encode(fam.encode_family(&[("result", result)])?)?;
    }
    let sources = engine.proof_sources();
    let mut fam = enc.encode_descriptor(
        "proof_source_fetches",
        "Fetches of the proof sources ([crawlers] range_urls, [networks] asn_url), by source URL and outcome (updated, not_modified: a 304, failed: no body, refused: a body that does not parse; after failed or refused the previous list stays in force)",
        None,
        MetricType::Counter,
    )?;
    for s in &sources {
        for (outcome, n) in FetchOutcome::ALL.iter().zip(s.fetches) {
            ConstCounter::new(n).encode(
                fam.encode_family(&[("source", s.url.as_str()), ("outcome", outcome.as_str())])?,
            )?;
        }
    }
    let mut fam = enc.encode_descriptor(
        "proof_source_entries",
        "Prefixes (or ASN ranges) in force from each proof source, by source URL (0: nothing fetched yet and no copy on disk)",
        None,
        MetricType::Gauge,
    )?;
    for s in &sources {
        ConstGauge::new(i64::try_from(s.entries).unwrap_or(i64::MAX))
            .encode(fam.encode_family(&[("source", s.url.as_str())])?)?;
    }
    let mut fam = enc.encode_descriptor(
        "proof_source_age_seconds",
        "Seconds since the data in force from each proof source was last fetched or confirmed current (a 304), by source URL; it grows while fetches fail (absent until the source has data)",
        None,
        MetricType::Gauge,
    )?;
    let now_ms = engine.clock.now_ms();
    for s in &sources {
        if let Some(at) = s.data_confirmed_ms {
            ConstGauge::new(now_ms.saturating_sub(at) as f64 / 1000.0)
                .encode(fam.encode_family(&[("source", s.url.as_str())])?)?;
        }
    }
    let mut fam = enc.encode_descriptor(
        "crawler_dns_lookups",
        "Forward-confirmed reverse DNS checks of claiming crawlers, by result (confirmed, refuted: no name under a suffix resolves back, failed: no answer)",
        None,
        MetricType::Counter,
    )?;
    for (result, v) in [
        ("confirmed", dns.confirmed.load(Ordering::Relaxed)),
        ("refuted", dns.refuted.load(Ordering::Relaxed)),
        ("failed", dns.failed.load(Ordering::Relaxed)),
    ] {
        ConstCounter::new(v).encode(fam.encode_family(&[("result", result)])?)?;
    }
    let mut fam = enc.encode_descriptor(
        "crawler_dns_not_asked",
        "Reverse-DNS checks due but not asked, by why (in_flight: dns_max_in_flight checks were running; network_budget: the caller's network had spent dns_lookups_per_network this hour); the caller stays pending",
        None,
        MetricType::Counter,
    )?;
    for (why, v) in [
        ("in_flight", dns.skipped_in_flight.load(Ordering::Relaxed)),
        (
            "network_budget",
            dns.skipped_network.load(Ordering::Relaxed),
        ),
    ] {
        ConstCounter::new(v).encode(fam.encode_family(&[("why", why)])?)?;
    }
    gauge(
        enc,
        "crawler_dns_cached",
        "Addresses whose reverse-DNS answer is cached",
        cached,
    )?;
    gauge(
        enc,
        "crawler_dns_in_flight",
        "Reverse-DNS checks queued or running",
        in_flight,
    )
}
