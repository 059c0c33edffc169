//! Kernel metrics from the real dataplane: the eBPF object loaded and attached (TC) to a veth
//! pair in namespaces this test creates, maps pinned under a private directory, real TCP
//! handshakes through it; the scrape must show `kernel_attached 1`, every verdict counter
//! (equal to what the pinned map holds) and map fill. Needs root and the built object
//! (`cargo xtask build-ebpf`): skipped outside CI without them, a failure under `CI=true`.

use crate::kernel_support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use limiter_daemon::config::kernel::KernelMode;
use limiter_daemon::config::{Config, EnvMap};
use limiter_daemon::metrics::sources::AttachedKernel;
use limiter_daemon::metrics::{KernelSource, Metrics};

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn kernel_verdicts_map_fill_and_attached_are_scraped() {
    let Some(kernel_support::Dataplane {
        pair,
        listener,
        port,
        pins,
    }) = kernel_support::dataplane("lmm", 1, "limiter-metrics-")
    else {
        return;
    };
    let text = format!(
        "[kernel]\nmode = \"required\"\nattach = \"tc\"\ninterfaces = [\"{}\"]\npin_path = \"{}\"\n\
         protected_ports = [{port}]\n",
        pair.server_if,
        pins.0.display()
    );
    let cfg = Config::from_toml_str(&text, Path::new("test.toml"), &EnvMap::new()).unwrap();
    let (rt, dp) = kernel_support::attach(&pair, &cfg.kernel);

    let metrics = Metrics::new("limiter");
    metrics.attach_kernel(KernelSource {
        mode: KernelMode::Required,
        attached: Some(AttachedKernel {
            maps: Arc::clone(dp.maps()),
            events: Arc::clone(dp.event_stats()),
            interfaces: dp.attachments().len(),
        }),
    });
    let before = metrics.render();
    assert_eq!(
        value(&before, "limiter_kernel_attached"),
        Some(1.0),
        "{before}"
    );
    assert_eq!(value(&before, "limiter_kernel_interfaces"), Some(1.0));
    let syn_before = value(
        &before,
        r#"limiter_kernel_verdicts_total{verdict="pass_syn"}"#,
    )
    .unwrap_or_else(|| panic!("no pass_syn series:\n{before}"));

    // Three handshakes to the protected port (the anonymous ceiling admits them).
    for _ in 0..3 {
        assert!(pair.connect_from(pair.client_ips[0], port, Duration::from_secs(3)));
    }
    let counters = dp.maps().counters().unwrap();
    let after = metrics.render();
    for (name, v) in counters.named() {
        let series = format!(r#"limiter_kernel_verdicts_total{{verdict="{name}"}}"#);
        let got = value(&after, &series).unwrap_or_else(|| panic!("no {series}:\n{after}"));
        // Later packets (ACKs, FINs) may land between the two reads; SYNs cannot.
        if name == "pass_syn" {
            assert_eq!(got, v as f64, "{series}");
        } else {
            assert!(got >= v as f64, "{series}: {got} < {v}");
        }
    }
    let syn_after = value(
        &after,
        r#"limiter_kernel_verdicts_total{verdict="pass_syn"}"#,
    )
    .unwrap();
    assert!(
        syn_after >= syn_before + 3.0,
        "three SYNs counted: {syn_before} -> {syn_after}"
    );
    assert!(
        after.contains("limiter_kernel_map_capacity{map="),
        "map fill rendered:\n{after}"
    );
    assert!(value(&after, "limiter_kernel_events_total").is_some());

    drop(listener);
    drop(dp);
    drop(rt);
    drop(pins);
}
