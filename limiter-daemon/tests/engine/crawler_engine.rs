//! Where the crawler rung sits among the other proofs, against the real engine and store with
//! an injected clock: a published range makes an anonymous or session caller a crawler (its
//! own windows, its tier pushed to the kernel); a verified API key still wins; a fake claim
//! leaves the caller what it is.

use crate::rig::*;
use limiter_daemon::engine::keys::IssueKey;
use limiter_daemon::engine::{Tier, WindowKind};
use limiter_daemon::model::CrawlerStatus;

const GOOGLEBOT: &str = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";

/// A rig whose `[crawlers]` reads one range file holding 66.249.64.0/27, plus `extra`.
fn crawler_rig(ranges_dir: &std::path::Path, extra: &str) -> Rig {
    let file = ranges_dir.join("googlebot.json");
    std::fs::write(&file, r#"{"prefixes":[{"ipv4Prefix":"66.249.64.0/27"}]}"#).unwrap();
    rig(&format!(
        "[crawlers]\nrange_files = [{:?}]\n{extra}",
        file.display().to_string()
    ))
}

#[test]
fn a_range_source_is_metered_on_the_crawler_rung_and_its_tier_reaches_the_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let r = crawler_rig(dir.path(), "[tiers.crawler]\nburst = 250\nhourly = 7000\n");
    for h in [
        headers(&[]),
        headers(&[("cookie", "session=1"), ("user-agent", GOOGLEBOT)]),
    ] {
        let d = r.request("66.249.64.9", "GET", "/", &h);
        assert_eq!(d.tier, Tier::Crawler, "above session: {d:?}");
        assert_eq!(d.crawler, Some(CrawlerStatus::Ranges));
        assert_eq!(d.window(WindowKind::Burst).unwrap().limit, 250);
        assert_eq!(d.window(WindowKind::Hourly).unwrap().limit, 7_000);
        assert_eq!(d.window(WindowKind::Daily).unwrap().limit, 1_000);
        assert!(
            d.identity.starts_with("ip:"),
            "counted per address: {}",
            d.identity
        );
    }
    assert!(r.sink.events().contains(&SinkEvent::SetTier {
        ip: ip("66.249.64.9"),
        tier: Tier::Crawler
    }));
    let d = r.get("66.249.64.40", "/");
    assert_eq!((d.tier, d.crawler), (Tier::Anon, None));
}

#[test]
fn a_verified_key_wins_over_a_crawler_proof() {
    let dir = tempfile::tempdir().unwrap();
    let r = crawler_rig(dir.path(), "");
    let key = r.engine.keys().issue(IssueKey::default()).unwrap();
    let h = headers(&[("authorization", &format!("Bearer {}", key.token))]);
    let pending = r.request("66.249.64.9", "GET", "/", &h);
    assert_eq!(
        pending.tier,
        Tier::Crawler,
        "the proof holds while the key is pending"
    );
    r.land_lookups();
    let d = r.request("66.249.64.9", "GET", "/", &h);
    assert_eq!((d.tier, d.crawler), (Tier::Sponsor, None));
    assert!(d.identity.starts_with("key:"), "{}", d.identity);
}

#[test]
fn a_fake_claim_leaves_the_caller_what_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let r = crawler_rig(dir.path(), "rdns_suffixes = []\n");
    let d = r.request(
        "203.0.113.5",
        "GET",
        "/",
        &headers(&[("cookie", "session=1"), ("user-agent", GOOGLEBOT)]),
    );
    assert_eq!(
        (d.tier, d.crawler),
        (Tier::Session, Some(CrawlerStatus::Fake))
    );
    assert_eq!(d.window(WindowKind::Burst).unwrap().limit, 300);
    let d = r.request(
        "203.0.113.6",
        "GET",
        "/",
        &headers(&[("user-agent", GOOGLEBOT)]),
    );
    assert_eq!((d.tier, d.crawler), (Tier::Anon, Some(CrawlerStatus::Fake)));
    assert!(
        !r.sink
            .events()
            .iter()
            .any(|e| matches!(e, SinkEvent::SetTier { .. })),
        "a fake raises nothing in the kernel"
    );
}
