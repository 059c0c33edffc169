//! Forward-confirmed reverse DNS through the real daemon, against a real DNS server the test
//! starts on a free loopback port (dnsmasq, with PTR and A records): a Googlebot whose PTR name
//! resolves back is metered `crawler` once the lookup lands (anonymous until then); one whose
//! PTR name resolves elsewhere, and one with no PTR at all, are fakes: metered as anonymous
//! and counted in `<ns>_fake_crawlers_total`. A caller that claims no crawler is never looked
//! up. With `CI=true` a missing dnsmasq fails the test.

use std::net::{TcpListener, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::rig::{scrape, tier, value, GOOGLEBOT};
use limiter_tests::free_addr;

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
    start_dnsmasq_logged(port, None)
}

/// [`start_dnsmasq`], logging every query it is asked to `log` (`query[PTR] <name> from …`),
/// so a test counts what reached the DNS server.
fn start_dnsmasq_logged(port: u16, log: Option<&std::path::Path>) -> Dnsmasq {
    let facility = log.map_or("--log-facility=-".to_string(), |p| {
        format!("--log-facility={}", p.display())
    });
    let child = Command::new("dnsmasq")
        .args([
            "--no-daemon",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--listen-address=127.0.0.1",
            "--user=root",
            &facility,
            // Authoritative for these zones: a name not listed is NXDOMAIN (as a real reverse
            // zone answers for an address without PTR), never "refused, no upstream".
            "--local=/in-addr.arpa/",
            "--local=/googlebot.com/",
        ])
        .args(log.map(|_| "--log-queries"))
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
    let _d = limiter_tests::daemon::Daemon::with_api(
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
        let d = crate::rig::decide(api, fake, GOOGLEBOT);
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
    let _d = limiter_tests::daemon::Daemon::with_api(
        dir.path(),
        api,
        &format!("listen = \"{metrics}\"\n[crawlers]\nrdns_suffixes = []\n"),
    );
    for _ in 0..3 {
        let d = crate::rig::decide(api, "203.0.113.9", GOOGLEBOT);
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

/// PTR queries dnsmasq logged whose name ends with `zone` (`….in-addr.arpa`, `….ip6.arpa`).
fn ptr_queries(log: &std::path::Path, zone: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once("query[PTR] "))
        .filter(|(_, rest)| rest.split(' ').next().is_some_and(|n| n.ends_with(zone)))
        .count()
}

/// Issue 21 P7: fake crawler user agents bought one DNS lookup per address: 300 requests from
/// distinct addresses in one /64 made 600 PTR queries, even for callers already locked out. A
/// lookup is now asked per caller as identities are grouped (the /64), only for a request that
/// is admitted (none for a caller refused or locked), and at most `dns_lookups_per_network` an
/// hour per network; counted at the DNS server.
#[test]
fn fake_crawlers_buy_one_lookup_per_caller_none_when_refused_or_locked_and_a_network_budget() {
    if !limiter_tests::require(dnsmasq_available(), "dnsmasq (apt-get install dnsmasq)") {
        return;
    }
    const BINGBOT: &str = "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)";
    let port = free_dns_port();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("dnsmasq.log");
    let _dns = start_dnsmasq_logged(port, Some(&log));
    let (api, metrics) = (free_addr(), free_addr());
    let _d = limiter_tests::daemon::Daemon::with_api(
        dir.path(),
        api,
        &format!(
            "listen = \"{metrics}\"\n[crawlers]\nresolver = \"127.0.0.1:{port}\"\n\
             rdns_suffixes = [\".search.msn.com\"]\ndns_lookups_per_network = 5\n\
             [tiers.anon]\nburst = 100\nhourly = 100000\n\
             [networks.prefix]\nburst = 10000\nhourly = 50\n"
        ),
    );
    let lookups = || {
        let text = scrape(metrics);
        ["confirmed", "refuted", "failed"]
            .iter()
            .map(|r| {
                value(
                    &text,
                    &format!("limiter_crawler_dns_lookups_total{{result=\"{r}\"}}"),
                )
            })
            .sum::<f64>()
    };
    let settle = |want: f64, what: &str| {
        limiter_tests::poll(Duration::from_secs(20), what, || {
            (lookups() >= want).then_some(())
        });
    };

    // 1. Ninety addresses of one /64: the first 50 admitted (the /48's hourly budget), the
    // rest refused `network`. One caller, one lookup.
    for i in 0..90 {
        let d = crate::rig::decide(api, &format!("2001:db8:1:2::{:x}", i + 1), BINGBOT);
        assert_eq!(d["tier"], "anon", "{d}");
    }
    settle(1.0, "the /64's lookup to land");
    let one_lookup = ptr_queries(&log, "2.0.0.0.1.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa");
    assert!(
        (1..=2).contains(&one_lookup),
        "one lookup for the /64 ({one_lookup} PTR queries)"
    );

    // 2. Forty /64s of another /48, one request each: five lookups, the rest not asked.
    for i in 0..40 {
        crate::rig::decide(api, &format!("2001:db8:2:{i:x}::1"), BINGBOT);
    }
    settle(6.0, "the /48's five lookups to land");
    // 2001:db8:2::/48, reversed (2001:db8:1:2::/64 ends in 1.0.0.0 before it, so is not counted).
    let in_48 = ptr_queries(&log, ".2.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa");
    assert!(
        (5..=5 * one_lookup).contains(&in_48),
        "five lookups for the /48 ({in_48} PTR queries)"
    );
    let text = scrape(metrics);
    assert_eq!(
        value(
            &text,
            "limiter_crawler_dns_not_asked_total{why=\"network_budget\"}"
        ),
        35.0,
        "{text}"
    );

    // 3. A caller locked out by its own burst, then claiming bingbot: never looked up.
    for _ in 0..101 {
        crate::rig::decide(api, "198.51.100.7", "curl/8.5.0");
    }
    let d = crate::rig::decide(api, "198.51.100.7", "curl/8.5.0");
    assert_eq!(d["reason"], "locked", "{d}");
    // 4. A caller refused by its network's spent budget, claiming bingbot: never looked up.
    for (who, why) in [("198.51.100.7", "locked"), ("198.51.100.8", "network")] {
        for _ in 0..20 {
            let d = crate::rig::decide(api, who, BINGBOT);
            assert_eq!(d["reason"], why, "{who}: {d}");
        }
    }
    // Anything queued would have landed by now: one more admitted caller's lookup lands after.
    crate::rig::decide(api, "192.0.2.1", BINGBOT);
    settle(7.0, "the control caller's lookup to land");
    for name in ["7.100.51.198.in-addr.arpa", "8.100.51.198.in-addr.arpa"] {
        assert_eq!(ptr_queries(&log, name), 0, "{name} was never asked");
    }
    assert!(
        ptr_queries(&log, "1.2.0.192.in-addr.arpa") >= 1,
        "the control was"
    );
    let total = ptr_queries(&log, ".arpa");
    eprintln!("PTR queries: the /64 {one_lookup}, the /48 {in_48}, in all {total}");
    assert!(
        total <= 7 * one_lookup,
        "{total} PTR queries for 7 lookups of {one_lookup} each"
    );
}
