//! The standard `process_*` metrics every Prometheus client exports, read from `/proc/self` at
//! scrape time: resident and virtual memory, open and maximum descriptors, CPU seconds and the
//! start time. Unprefixed (not `<ns>_`), as dashboards and alerts written for any exporter
//! expect them.
//!
//! A field `/proc` does not give (another OS, a restricted `/proc`) leaves its series out
//! rather than failing the scrape.

use std::fmt;

use procfs::process::{LimitValue, Process};
use procfs::WithCurrentSystemInfo as _;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

#[derive(Debug)]
pub struct ProcessCollector;

fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> fmt::Result {
    ConstGauge::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let Ok(me) = Process::myself() else {
            return Ok(());
        };
        if let Ok(stat) = me.stat() {
            let ticks = procfs::ticks_per_second() as f64;
            ConstCounter::new((stat.utime + stat.stime) as f64 / ticks).encode(
                enc.encode_descriptor(
                    "process_cpu_seconds",
                    "Total user and system CPU time spent in seconds.",
                    None,
                    MetricType::Counter,
                )?,
            )?;
            gauge(
                &mut enc,
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                stat.rss_bytes().get() as f64,
            )?;
            gauge(
                &mut enc,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                stat.vsize as f64,
            )?;
            if let Ok(boot) = procfs::boot_time_secs() {
                gauge(
                    &mut enc,
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    boot as f64 + stat.starttime as f64 / ticks,
                )?;
            }
        }
        if let Ok(n) = me.fd_count() {
            gauge(
                &mut enc,
                "process_open_fds",
                "Number of open file descriptors.",
                n as f64,
            )?;
        }
        if let Ok(limits) = me.limits() {
            if let LimitValue::Value(max) = limits.max_open_files.soft_limit {
                gauge(
                    &mut enc,
                    "process_max_fds",
                    "Maximum number of open file descriptors.",
                    max as f64,
                )?;
            }
        }
        Ok(())
    }
}
