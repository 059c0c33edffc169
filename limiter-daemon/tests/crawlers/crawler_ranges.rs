//! The real daemon meters a source inside an operator-supplied range file (the JSON Google and
//! Bing publish) on the `crawler` rung, says so in `x-ratelimit-tier`, and re-reads the file
//! when it changes on disk, without a restart; a file broken on disk keeps the previous ranges
//! and is counted as a refused re-read.

use std::path::Path;
use std::time::Duration;

use crate::rig::{scrape, tier, value};
use limiter_tests::free_addr;

/// Replaces `path` in one step, so a poll never reads half a file.
fn publish(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn ranges(v4: &str, v6: &str) -> String {
    format!(
        r#"{{"creationTime":"2026-11-30T15:46:03.000000","prefixes":[{{"ipv4Prefix":"{v4}"}},{{"ipv6Prefix":"{v6}"}}]}}"#
    )
}

#[test]
fn a_source_in_a_range_file_is_a_crawler_and_the_file_is_followed_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("googlebot.json");
    publish(&file, &ranges("66.249.64.0/27", "2001:4860:4801:10::/64"));
    let (api, metrics) = (free_addr(), free_addr());
    let _d = limiter_tests::daemon::Daemon::with_api(
        dir.path(),
        api,
        &format!(
            "listen = \"{metrics}\"\n[crawlers]\nrange_files = [{:?}]\nrange_poll = \"100ms\"\n\
             [tiers.crawler]\nhourly = 4321\n",
            file.display().to_string()
        ),
    );
    let d = crate::rig::decide(api, "66.249.64.5", "");
    assert_eq!(d["tier"], "crawler", "{d}");
    assert_eq!(d["headers"]["x-ratelimit-tier"], "crawler", "{d}");
    assert_eq!(
        d["headers"]["x-ratelimit-limit-hour"], "4321",
        "its own budget: {d}"
    );
    assert_eq!(tier(api, "2001:4860:4801:10::77", ""), "crawler");
    assert_eq!(tier(api, "66.249.65.5", ""), "anon");
    let text = scrape(metrics);
    assert_eq!(
        value(&text, "limiter_crawler_range_prefixes"),
        2.0,
        "{text}"
    );
    assert_eq!(
        value(&text, "limiter_crawler_requests_total{proof=\"ranges\"}"),
        2.0,
        "{text}"
    );

    // The publisher moves its range: the new file takes effect without a restart.
    publish(&file, &ranges("66.249.65.0/24", "2001:4860:4801:10::/64"));
    limiter_tests::poll(Duration::from_secs(20), "the new range in force", || {
        (tier(api, "66.249.65.5", "") == "crawler").then_some(())
    });
    assert_eq!(
        tier(api, "66.249.64.5", ""),
        "anon",
        "the old range is gone"
    );

    // A broken file keeps what is in force, and says so.
    publish(&file, r#"{"prefixes":[{"ipv4Prefix":"66.249.66.0/99"}]}"#);
    limiter_tests::poll(
        Duration::from_secs(20),
        "the refused re-read counted",
        || {
            let text = scrape(metrics);
            (value(
                &text,
                "limiter_crawler_range_reloads_total{result=\"refused\"}",
            ) == 1.0)
                .then_some(())
        },
    );
    assert_eq!(tier(api, "66.249.65.5", ""), "crawler");
    let text = scrape(metrics);
    assert_eq!(
        value(
            &text,
            "limiter_crawler_range_reloads_total{result=\"applied\"}"
        ),
        1.0,
        "{text}"
    );

    // A hijacked list that claims the whole Internet is refused the same way: a caller from
    // outside the last good ranges stays anonymous.
    publish(&file, &ranges("0.0.0.0/0", "::/0"));
    limiter_tests::poll(
        Duration::from_secs(20),
        "the wide list's refused re-read counted",
        || {
            let text = scrape(metrics);
            (value(
                &text,
                "limiter_crawler_range_reloads_total{result=\"refused\"}",
            ) == 2.0)
                .then_some(())
        },
    );
    assert_eq!(tier(api, "203.0.113.9", ""), "anon");
    assert_eq!(tier(api, "2001:db8::9", ""), "anon");
    assert_eq!(tier(api, "66.249.65.5", ""), "crawler");
}

#[test]
fn a_broken_range_file_at_start_is_a_config_error_naming_the_field_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bingbot.json");
    std::fs::write(
        &file,
        r#"{"prefixes":[{"ipv4Prefix":"157.55.39.0/24"},{"ipv6Prefix":"x"}]}"#,
    )
    .unwrap();
    let config = dir.path().join("limiter.toml");
    std::fs::write(
        &config,
        format!(
            "[kernel]\nmode = \"off\"\n\n[crawlers]\nrange_files = [{:?}]\n",
            file.display().to_string()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_limiter-daemon"))
        .arg("check-config")
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("line 5")
            && err.contains("crawlers.range_files")
            && err.contains("bingbot.json")
            && err.contains("prefixes[1]"),
        "{err}"
    );
}

#[test]
fn a_reload_reads_the_range_files_anew_and_a_broken_one_keeps_the_ranges_in_force() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second, broken) = (
        dir.path().join("first.json"),
        dir.path().join("second.json"),
        dir.path().join("broken.json"),
    );
    publish(&first, &ranges("66.249.64.0/27", "2001:4860:4801:10::/64"));
    publish(&second, &ranges("66.249.70.0/24", "2001:4860:4801:20::/64"));
    publish(&broken, "{\"prefixes\": [");
    let (api, metrics) = (free_addr(), free_addr());
    let d = limiter_tests::daemon::Daemon::with_api(
        dir.path(),
        api,
        &format!(
            "listen = \"{metrics}\"\n[crawlers]\nrange_files = [{:?}]\n",
            first.display().to_string()
        ),
    );
    assert_eq!(tier(api, "66.249.64.5", ""), "crawler");
    let config = dir.path().join("limiter.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let reload_with = |file: &Path| {
        let swapped = text.replace(
            &format!("{:?}", first.display().to_string()),
            &format!("{:?}", file.display().to_string()),
        );
        std::fs::write(&config, swapped).unwrap();
        let hup = std::process::Command::new("kill")
            .args(["-HUP", &d.pid().to_string()])
            .status()
            .unwrap();
        assert!(hup.success());
    };
    reload_with(&second);
    limiter_tests::poll(Duration::from_secs(20), "the reloaded ranges", || {
        (tier(api, "66.249.70.5", "") == "crawler").then_some(())
    });
    assert_eq!(tier(api, "66.249.64.5", ""), "anon");
    reload_with(&broken);
    limiter_tests::poll(Duration::from_secs(20), "the refused reload", || {
        let text = scrape(metrics);
        (value(&text, "limiter_config_reloads_total{result=\"refused\"}") == 1.0).then_some(())
    });
    assert_eq!(
        tier(api, "66.249.70.5", ""),
        "crawler",
        "the old ranges stay"
    );
}

#[test]
fn a_crawler_over_its_burst_is_told_to_pace_itself_never_to_sign_in() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bingbot.json");
    publish(&file, &ranges("157.55.39.0/24", "2a01:111:f100:3000::/52"));
    let api = free_addr();
    let _d = limiter_tests::daemon::Daemon::with_api(
        dir.path(),
        api,
        &format!(
            "listen = \"\"\n[crawlers]\nrange_files = [{:?}]\n[tiers.crawler]\nburst = 2\n",
            file.display().to_string()
        ),
    );
    for _ in 0..2 {
        assert_eq!(
            crate::rig::decide(api, "157.55.39.1", "")["action"],
            "allow"
        );
    }
    let d = crate::rig::decide(api, "157.55.39.1", "");
    assert_eq!(d["action"], "reject", "{d}");
    let problem = &d["problem"];
    assert_eq!(problem["tier"], "crawler", "{d}");
    assert_eq!(problem["reason"], "burst", "{d}");
    let upgrade = problem["upgrade"].as_str().unwrap();
    assert!(
        upgrade.starts_with("Verified crawler") && !upgrade.contains("Sign in"),
        "{upgrade}"
    );
}
