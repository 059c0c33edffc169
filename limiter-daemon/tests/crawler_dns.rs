//! Forward-confirmed reverse DNS through the real daemon, against a real DNS server the test
//! starts on a free loopback port (dnsmasq, with PTR and A records): a Googlebot whose PTR name
//! resolves back is metered `crawler` once the lookup lands (anonymous until then); one whose
//! PTR name resolves elsewhere, and one with no PTR at all, are fakes: metered as anonymous
//! and counted in `<ns>_fake_crawlers_total`. A caller that claims no crawler is never looked
//! up. With `CI=true` a missing dnsmasq fails the test.

mod crawler_support;
mod daemon_support;

use std::net::{TcpListener, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crawler_support::{scrape, tier, value, GOOGLEBOT};
use daemon_support::free_addr;

struct Dnsmasq(Child);

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        limiter_tests::process::terminate(&mut self.0, Duration::from_secs(5));
    }
}

fn dnsmasq_available() -> bool {
    Command::new("dnsmasq")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A loopback port free for both UDP and TCP (dnsmasq serves both on it).
fn free_dns_port() -> u16 {
    loop {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// dnsmasq answering only from its command line: 66.249.66.1 ⇄ crawl-66-249-66-1.googlebot.com
/// (confirmed); 66.249.66.2 → crawl-66-249-66-2.googlebot.com, which resolves to 66.249.66.99
/// (not confirmed); 66.249.66.3 has no PTR.
fn start_dnsmasq(port: u16) -> Dnsmasq {
    let child = Command::new("dnsmasq")
        .args([
            "--no-daemon",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--listen-address=127.0.0.1",
            "--user=root",
            "--log-facility=-",
            // Authoritative for these zones: a name not listed is NXDOMAIN (as a real reverse
            // zone answers for an address without PTR), never "refused, no upstream".
            "--local=/in-addr.arpa/",
            "--local=/googlebot.com/",
        ])
        .arg(format!("--port={port}"))
        .args([
            "--ptr-record=1.66.249.66.in-addr.arpa,crawl-66-249-66-1.googlebot.com",
            "--host-record=crawl-66-249-66-1.googlebot.com,66.249.66.1",
            "--ptr-record=2.66.249.66.in-addr.arpa,crawl-66-249-66-2.googlebot.com",
            "--address=/crawl-66-249-66-2.googlebot.com/66.249.66.99",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start dnsmasq");
    let d = Dnsmasq(child);
    limiter_tests::poll(Duration::from_secs(10), "dnsmasq listening", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    });
    d
}

#[test]
fn googlebot_is_a_crawler_once_its_name_resolves_back_and_fakes_are_counted() {
    if !limiter_tests::require(dnsmasq_available(), "dnsmasq (apt-get install dnsmasq)") {
        return;
    }
    let port = free_dns_port();
    let _dns = start_dnsmasq(port);
    let dir = tempfile::tempdir().unwrap();
    let (api, metrics) = (free_addr(), free_addr());
    let _d = daemon_support::start(
        dir.path(),
        api,
        &format!(
            "listen = \"{metrics}\"\n[crawlers]\nresolver = \"127.0.0.1:{port}\"\n\
             rdns_suffixes = [\".googlebot.com\"]\n"
        ),
    );

    // Metered as anonymous while the lookup is in flight, then as a crawler.
    assert_eq!(tier(api, "66.249.66.1", GOOGLEBOT), "anon");
    limiter_tests::poll(
        Duration::from_secs(20),
        "the confirmed name to land",
        || (tier(api, "66.249.66.1", GOOGLEBOT) == "crawler").then_some(()),
    );

    // A PTR name under the suffix that does not resolve back, and no PTR at all: fakes.
    for fake in ["66.249.66.2", "66.249.66.3"] {
        assert_eq!(tier(api, fake, GOOGLEBOT), "anon");
    }
    limiter_tests::poll(Duration::from_secs(20), "both refutations to land", || {
        let text = scrape(metrics);
        let refuted = value(
            &text,
            "limiter_crawler_dns_lookups_total{result=\"refuted\"}",
        );
        let failed = value(
            &text,
            "limiter_crawler_dns_lookups_total{result=\"failed\"}",
        );
        assert_eq!(failed, 0.0, "every lookup is answered: {text}");
        (refuted == 2.0).then_some(())
    });
    for fake in ["66.249.66.2", "66.249.66.3"] {
        let d = crawler_support::decide(api, fake, GOOGLEBOT);
        assert_eq!(d["tier"], "anon", "{d}");
        assert_eq!(d["headers"]["x-ratelimit-tier"], "anon", "{d}");
    }
    // Claiming nothing: never looked up, never a fake.
    assert_eq!(tier(api, "66.249.66.4", "curl/8.5.0"), "anon");

    let text = scrape(metrics);
    assert_eq!(value(&text, "limiter_fake_crawlers_total"), 2.0, "{text}");
    assert_eq!(
        value(
            &text,
            "limiter_crawler_dns_lookups_total{result=\"confirmed\"}"
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "limiter_crawler_dns_lookups_total{result=\"failed\"}"
        ),
        0.0,
        "{text}"
    );
    assert!(
        value(&text, "limiter_crawler_requests_total{proof=\"dns\"}") >= 1.0,
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "limiter_decisions_total{tier=\"crawler\",action=\"allow\",reason=\"none\",shadow=\"false\"}"
        ),
        value(&text, "limiter_crawler_requests_total{proof=\"dns\"}"),
        "{text}"
    );
}

#[test]
fn a_fake_googlebot_without_dns_proof_is_metered_anonymous_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (api, metrics) = (free_addr(), free_addr());
    // No suffixes: DNS proof off, so a claim outside the (empty) ranges is a fake at once.
    let _d = daemon_support::start(
        dir.path(),
        api,
        &format!("listen = \"{metrics}\"\n[crawlers]\nrdns_suffixes = []\n"),
    );
    for _ in 0..3 {
        let d = crawler_support::decide(api, "203.0.113.9", GOOGLEBOT);
        assert_eq!(d["tier"], "anon", "{d}");
        assert_eq!(d["headers"]["x-ratelimit-limit-hour"], "600", "{d}");
    }
    assert_eq!(
        tier(api, "203.0.113.10", "Mozilla/5.0 (X11; Linux x86_64)"),
        "anon"
    );
    let text = scrape(metrics);
    assert_eq!(value(&text, "limiter_fake_crawlers_total"), 3.0, "{text}");
    assert_eq!(
        value(
            &text,
            "limiter_crawler_dns_lookups_total{result=\"refuted\"}"
        ),
        0.0,
        "{text}"
    );
}
