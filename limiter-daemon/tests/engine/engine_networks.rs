//! Network budgets (`[networks]`): many addresses of one network are metered as one caller
//! there, a network's burst locks out the addresses that sent in its burst window (by default)
//! or its whole prefix (`lockout = "prefix"`: the deny list, the kernel's deny trie), each rung
//! counts against its own share of a network (a signed-in caller never spends its neighbours'),
//! and verified credentials are not counted against networks. Part of the store conformance suite:
//! `cargo xtask test` runs it on the embedded store, on Valkey and on a Valkey Cluster.

use std::io::Write;

use crate::rig::*;
use limiter_daemon::engine::keys::IssueKey;
use limiter_daemon::engine::{Action, Reason, Tier, WindowKind};
use limiter_daemon::model::{ListKind, LockCause, NetworkName};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// Each address's own budgets are far above what the test sends; the network's are small.
const SMALL_NETWORK: &str = "[tiers.anon]\nburst = 100\nhourly = 600\n\
     [networks.prefix]\nburst = 1000\nhourly = 100\n";

fn addr(i: u32) -> String {
    format!("203.0.113.{}", i % 250 + 1)
}

#[test]
fn two_hundred_addresses_of_one_24_together_exceed_the_network_budget() {
    let r = rig(SMALL_NETWORK);
    let mut refused = Vec::new();
    for i in 0..200 {
        let d = r.get(&addr(i), "/");
        if d.action() == Action::Reject {
            refused.push((i, d));
        }
    }
    assert_eq!(refused.len(), 100, "the network's hourly budget is 100");
    let (first, d) = &refused[0];
    assert_eq!(
        *first, 100,
        "the 101st request of the /24 is the first refused"
    );
    assert_eq!(d.reason(), Some(Reason::Network));
    let net = d.network.clone().expect("the refusal names the network");
    assert_eq!(
        net.name,
        NetworkName::Prefix("203.0.113.0/24".parse().unwrap())
    );
    assert_eq!(net.window.kind, WindowKind::Hourly);
    assert_eq!((net.window.limit, net.window.remaining), (100, 0));
    assert!(d.retry_after_secs().unwrap() > 0);
    assert_eq!(
        d.lockout_level, None,
        "a spent hourly budget earns no strike"
    );
    // Each of those addresses is far under its own budget, and a refusal spent none of it.
    let own = d.window(WindowKind::Hourly).unwrap();
    assert_eq!(own.limit, 600);
    assert_eq!(
        own.remaining, 600,
        "the refused request spent none of its own budget"
    );

    // Another /24 is another network.
    let d = r.get("198.51.100.7", "/");
    assert_eq!(d.action(), Action::Allow, "{d:?}");
    assert!(
        r.sink.events().is_empty(),
        "no lockout: {:?}",
        r.sink.events()
    );
}

#[test]
fn a_refusal_by_its_own_budget_spends_nothing_of_the_network() {
    let r = rig("[tiers.anon]\nhourly = 2\n[networks.prefix]\nhourly = 5\n");
    for _ in 0..2 {
        assert_eq!(r.get("203.0.113.1", "/").action(), Action::Allow);
    }
    for _ in 0..10 {
        assert_eq!(r.get("203.0.113.1", "/").reason(), Some(Reason::Hourly));
    }
    for i in 2..5 {
        let d = r.get(&format!("203.0.113.{i}"), "/");
        assert_eq!(
            d.action(),
            Action::Allow,
            "request {i} of the network: {d:?}"
        );
    }
    assert_eq!(r.get("203.0.113.9", "/").reason(), Some(Reason::Network));
}

#[test]
fn a_verified_api_key_inside_the_network_is_unaffected() {
    let r = rig(SMALL_NETWORK);
    for i in 0..120 {
        r.get(&addr(i), "/");
    }
    assert_eq!(r.get(&addr(7), "/").reason(), Some(Reason::Network));
    let key = r.engine.keys().issue(IssueKey::default()).unwrap();
    let h = headers(&[("x-api-key", &key.token)]);
    r.request(&addr(7), "GET", "/", &h);
    r.land_lookups();
    for _ in 0..20 {
        let d = r.request(&addr(7), "GET", "/", &h);
        assert_eq!(d.tier, Tier::Sponsor);
        assert_eq!(d.action(), Action::Allow, "{d:?}");
    }
    // A session cookie is presence only: counted against the network too, but in the session
    // callers' share, which the anonymous callers did not spend.
    let s = headers(&[("cookie", "session=forged")]);
    let d = r.request(&addr(8), "GET", "/", &s);
    assert_eq!(
        (d.tier, d.action()),
        (Tier::Session, Action::Allow),
        "{d:?}"
    );
}

/// Issue 35: the /24's hourly budget (10 × anonymous) equalled one session's own hourly
/// budget, so one signed-in user who spent its own left a neighbour that had sent nothing
/// refused `network` for the rest of the hour. Each rung has its own share of a network, sized
/// by its own budget: a caller spending its own budget never uses up its neighbours'.
#[test]
fn a_session_user_spending_its_whole_hourly_budget_leaves_its_neighbours_admitted() {
    // Anonymous 5 an hour, session 10 × 5 = 50; the /24 is ten anonymous callers' worth, 50.
    let r =
        rig("[tiers.anon]\nhourly = 5\n[tiers.session]\ndaily = 100000\n[quota]\nanon = 100000\n");
    let cookie = headers(&[("cookie", "session=abc")]);
    for n in 0..50 {
        let d = r.request("203.0.113.10", "GET", "/", &cookie);
        assert_eq!(
            (d.tier, d.action()),
            (Tier::Session, Action::Allow),
            "request {n}: {d:?}"
        );
    }
    let d = r.request("203.0.113.10", "GET", "/", &cookie);
    assert_eq!(
        d.reason(),
        Some(Reason::Hourly),
        "its own budget is spent: {d:?}"
    );

    // The neighbour that sent nothing, anonymous or signed in, is admitted.
    let d = r.get("203.0.113.11", "/");
    assert_eq!((d.tier, d.action()), (Tier::Anon, Action::Allow), "{d:?}");
    let d = r.request("203.0.113.12", "GET", "/", &cookie);
    assert_eq!(
        (d.tier, d.action()),
        (Tier::Session, Action::Allow),
        "{d:?}"
    );
    assert!(
        r.sink.events().is_empty(),
        "nobody locked: {:?}",
        r.sink.events()
    );

    // The session share is still a network budget: ten session callers' worth (500). Nine more
    // spend theirs; the next session caller of the /24 is refused `network`, while anonymous
    // callers keep their own share.
    for i in 13..22 {
        let a = format!("203.0.113.{i}");
        for _ in 0..50 {
            r.request(&a, "GET", "/", &cookie);
        }
    }
    let d = r.request("203.0.113.30", "GET", "/", &cookie);
    assert_eq!(d.reason(), Some(Reason::Network), "{d:?}");
    let net = d.network.clone().unwrap();
    assert_eq!(
        (net.window.kind, net.window.limit),
        (WindowKind::Hourly, 500)
    );
    for i in 40..44 {
        let d = r.get(&format!("203.0.113.{i}"), "/");
        assert_eq!(d.action(), Action::Allow, "anonymous {i}: {d:?}");
    }
}

/// A burst of cookie-carrying addresses strikes the session share of its /24 and locks the
/// addresses that sent in it; an anonymous reader of the same /24 that sent in the same minute
/// is neither refused nor locked.
#[test]
fn a_burst_of_one_rung_locks_its_senders_not_the_other_rungs_readers() {
    let r = rig("[tiers.anon]\nburst = 100\n[tiers.session]\nburst = 200\n\
         [networks.prefix]\nburst = 20\nhourly = 100000\n");
    let reader = "203.0.113.200";
    for _ in 0..3 {
        assert_eq!(r.get(reader, "/").action(), Action::Allow);
    }
    // The session share's burst is 20 × 200 / 100 = 40.
    let cookie = headers(&[("cookie", "session=abc")]);
    for i in 1..=40 {
        let d = r.request(&format!("203.0.113.{i}"), "GET", "/", &cookie);
        assert_eq!(d.action(), Action::Allow, "session {i}: {d:?}");
    }
    let d = r.request("203.0.113.41", "GET", "/", &cookie);
    assert_eq!(d.reason(), Some(Reason::Network), "{d:?}");
    assert_eq!(d.network.clone().unwrap().locked.len(), 41);
    let (ips, _) = kernel_locks(&r);
    assert!(!ips.contains(&ip(reader)), "{ips:?}");
    assert_eq!(ips.len(), 41);
    let d = r.get(reader, "/");
    assert_eq!(d.action(), Action::Allow, "{d:?}");
}

#[test]
fn a_network_burst_strikes_and_locks_the_prefix_and_escalates() {
    let r = rig(
        "[tiers.anon]\nburst = 100\n[networks]\nlockout = \"prefix\"\n\
         [networks.prefix]\nburst = 50\nhourly = 100000\n[lockout]\nbase = \"60s\"\n",
    );
    for i in 0..50 {
        assert_eq!(r.get(&addr(i), "/").action(), Action::Allow, "request {i}");
    }
    let d = r.get(&addr(50), "/");
    assert_eq!(d.reason(), Some(Reason::Network), "{d:?}");
    assert_eq!(d.network.clone().unwrap().window.kind, WindowKind::Burst);
    assert_eq!(d.lockout_level, Some(1), "a network burst is a strike");
    let net: ipnet::IpNet = "203.0.113.0/24".parse().unwrap();
    let adds: Vec<_> = r
        .sink
        .events()
        .into_iter()
        .filter_map(|e| match e {
            SinkEvent::ListAdd {
                kind: ListKind::Deny,
                net,
                secs,
            } => Some((net, secs)),
            _ => None,
        })
        .collect();
    assert_eq!(adds.len(), 1, "{adds:?}");
    assert_eq!(adds[0].0, net, "the prefix goes to the kernel's deny trie");
    let secs = adds[0].1.expect("with a deadline");
    assert!((60..=66).contains(&secs), "level 1 lasts the base: {secs}");

    // Every address of the prefix is now locked; one outside it is not.
    let d = r.get("203.0.113.200", "/");
    assert_eq!(d.reason(), Some(Reason::Locked));
    assert_eq!(d.lock_cause, Some(LockCause::Network));
    assert_eq!(r.get("198.51.100.1", "/").action(), Action::Allow);
    let listed = r.engine.lockouts().all().unwrap();
    assert!(
        listed
            .iter()
            .any(|l| l.net == net && l.source == "strikes" && l.level == 1),
        "{listed:?}"
    );

    // After the lockout, a second burst locks for twice as long.
    r.advance_secs(70);
    for i in 0..50 {
        assert_eq!(r.get(&addr(i), "/").action(), Action::Allow, "again {i}");
    }
    let d = r.get(&addr(50), "/");
    assert_eq!(d.lockout_level, Some(2), "{d:?}");
    let last = r.sink.events().into_iter().rev().find_map(|e| match e {
        SinkEvent::ListAdd { secs, .. } => secs,
        _ => None,
    });
    assert!((120..=126).contains(&last.unwrap()), "{last:?}");
}

#[test]
fn a_caller_over_its_own_burst_is_struck_itself_not_its_network() {
    let r = rig("[tiers.anon]\nburst = 5\n[networks.prefix]\nburst = 5\n");
    for _ in 0..5 {
        assert_eq!(r.get("203.0.113.1", "/").action(), Action::Allow);
    }
    let d = r.get("203.0.113.1", "/");
    assert_eq!(d.reason(), Some(Reason::Burst), "{d:?}");
    assert_eq!(r.sink.locks().len(), 1, "the address is locked");
    assert!(
        !r.sink
            .events()
            .iter()
            .any(|e| matches!(e, SinkEvent::ListAdd { .. })),
        "the network is not"
    );
}

#[test]
fn ipv6_callers_are_metered_by_their_48() {
    let r = rig("[networks.prefix]\nhourly = 3\n");
    for i in 0..3 {
        let d = r.get(&format!("2001:db8:7:{i}::1"), "/");
        assert_eq!(d.action(), Action::Allow, "{d:?}");
    }
    let d = r.get("2001:db8:7:ff::9", "/");
    assert_eq!(d.reason(), Some(Reason::Network));
    assert_eq!(
        d.network.clone().unwrap().name.to_string(),
        "2001:db8:7::/48"
    );
    assert_eq!(r.get("2001:db8:8::1", "/").action(), Action::Allow);
}

#[test]
fn an_autonomous_system_is_one_caller_across_its_prefixes() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("ip2asn.tsv");
    let mut f = std::fs::File::create(&table).unwrap();
    writeln!(f, "198.51.100.0\t198.51.101.255\t64500\tZZ\tEXAMPLE-NET").unwrap();
    writeln!(f, "203.0.113.0\t203.0.113.255\t64501\tZZ\tOTHER").unwrap();
    drop(f);
    let r = rig(&format!(
        "[networks]\nasn_table = {:?}\n[networks.asn]\nhourly = 4\n",
        table.display().to_string()
    ));
    // Two /24s of AS64500, each well under the prefix budget.
    for a in [
        "198.51.100.1",
        "198.51.100.2",
        "198.51.101.1",
        "198.51.101.2",
    ] {
        assert_eq!(r.get(a, "/").action(), Action::Allow, "{a}");
    }
    let d = r.get("198.51.101.3", "/");
    assert_eq!(d.reason(), Some(Reason::Network), "{d:?}");
    assert_eq!(d.network.clone().unwrap().name, NetworkName::Asn(64500));
    assert_eq!(r.get("203.0.113.1", "/").action(), Action::Allow, "AS64501");
    assert_eq!(r.get("192.0.2.1", "/").action(), Action::Allow, "no AS");
}

#[test]
fn levels_can_be_turned_off() {
    let r = rig("[networks.prefix]\nenabled = false\n[tiers.anon]\nhourly = 600\n");
    for i in 0..300 {
        assert_eq!(r.get(&addr(i), "/").action(), Action::Allow);
    }
}

#[test]
fn a_verified_crawler_is_never_counted_against_its_network() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("googlebot.json");
    std::fs::write(&file, r#"{"prefixes":[{"ipv4Prefix":"66.249.64.0/27"}]}"#).unwrap();
    let r = rig(&format!(
        "[crawlers]\nrange_files = [{:?}]\n[networks.prefix]\nhourly = 5\n",
        file.display().to_string()
    ));
    // The crawler's range and anonymous neighbours share 66.249.64.0/24.
    for i in 0..40 {
        let d = r.get(&format!("66.249.64.{}", i % 30 + 1), "/");
        assert_eq!(
            (d.tier, d.action()),
            (Tier::Crawler, Action::Allow),
            "{i}: {d:?}"
        );
    }
    for i in 0..5 {
        let d = r.get(&format!("66.249.64.{}", 100 + i), "/");
        assert_eq!(
            (d.tier, d.action()),
            (Tier::Anon, Action::Allow),
            "{i}: {d:?}"
        );
    }
    assert_eq!(r.get("66.249.64.200", "/").reason(), Some(Reason::Network));
}

/// The addresses the kernel was told to lock, and the deny-list entries it was given.
fn kernel_locks(r: &Rig) -> (BTreeSet<IpAddr>, Vec<ipnet::IpNet>) {
    let mut ips = BTreeSet::new();
    let mut nets = Vec::new();
    for e in r.sink.events() {
        match e {
            SinkEvent::Lock { ip, .. } => {
                ips.insert(ip);
            }
            SinkEvent::ListAdd {
                kind: ListKind::Deny,
                net,
                ..
            } => nets.push(net),
            _ => {}
        }
    }
    (ips, nets)
}

/// Issue 21 P6: eleven addresses × 21 requests struck their /24, and then 203.0.113.7, which
/// had sent nothing, was refused `locked` for 65 s. By default a network's strike locks out the
/// addresses that sent in the offending burst window, in the store and the kernel, each at its
/// own escalation; a newcomer is refused `network` (no lock) while the budget is spent.
#[test]
fn a_network_strike_locks_the_addresses_that_sent_and_never_one_that_sent_nothing() {
    let r = rig(
        "[tiers.anon]\nburst = 100\n[networks.prefix]\nburst = 200\nhourly = 100000\n\
         [lockout]\nbase = \"60s\"\n",
    );
    let senders: Vec<String> = (101..112).map(|i| format!("203.0.113.{i}")).collect();
    let mut struck = None;
    'rounds: for round in 0..21 {
        for (i, a) in senders.iter().enumerate() {
            let d = r.get(a, "/");
            if d.action() == Action::Reject {
                struck = Some((round * 11 + i, d));
                break 'rounds;
            }
        }
    }
    let (n, d) = struck.expect("the /24's burst of 200 refuses");
    assert_eq!(n, 200, "the 201st request of the /24 is refused");
    assert_eq!(d.reason(), Some(Reason::Network), "{d:?}");
    assert_eq!(
        d.lockout_level,
        Some(1),
        "the striking caller is locked too"
    );
    let net = d.network.clone().unwrap();
    assert_eq!(net.window.kind, WindowKind::Burst);
    assert_eq!(net.locked.len(), 11, "{:?}", net.locked);
    assert!(
        d.retry_after_secs().unwrap() >= 60,
        "Retry-After is the caller's lockout"
    );

    // The eleven are locked in the kernel and the store, and nothing else is.
    let (ips, nets) = kernel_locks(&r);
    let want: BTreeSet<IpAddr> = senders.iter().map(|a| a.parse().unwrap()).collect();
    assert_eq!(
        ips, want,
        "exactly the senders reach the kernel's lockout map"
    );
    assert!(nets.is_empty(), "no prefix in the deny trie: {nets:?}");
    let listed = r.engine.lockouts().all().unwrap();
    assert_eq!(listed.len(), 11, "{listed:?}");
    for l in &listed {
        assert_eq!(l.cause, LockCause::Network, "{l:?}");
        assert_eq!(l.source, "strikes");
        assert_eq!(l.reason, "network 203.0.113.0/24 burst");
        assert_eq!(l.level, 1);
    }
    for a in &senders {
        let d = r.get(a, "/");
        assert_eq!(
            (d.reason(), d.lock_cause),
            (Some(Reason::Locked), Some(LockCause::Network)),
            "{a}: {d:?}"
        );
    }

    // 203.0.113.7 sent nothing: refused by the spent budget, never locked.
    for _ in 0..3 {
        let d = r.get("203.0.113.7", "/");
        assert_eq!(d.reason(), Some(Reason::Network), "{d:?}");
        assert_eq!(d.lockout_level, None, "a newcomer earns no lockout");
        assert_eq!(d.lock_cause, None);
    }
    assert_eq!(
        kernel_locks(&r).0,
        want,
        "the newcomer never reached the kernel"
    );
    assert!(r
        .engine
        .lockouts()
        .get(ip("203.0.113.7"))
        .unwrap()
        .is_none());

    // Once the burst window has room, the newcomer is admitted; the senders' second offence
    // escalates each of them.
    r.advance_secs(70);
    assert_eq!(r.get("203.0.113.7", "/").action(), Action::Allow);
    let mut second = None;
    'again: for _ in 0..21 {
        for a in &senders {
            let d = r.get(a, "/");
            if d.action() == Action::Reject {
                second = Some(d);
                break 'again;
            }
        }
    }
    let d = second.expect("a second burst");
    assert_eq!(d.lockout_level, Some(2), "{d:?}");
    let locked = d.network.clone().unwrap().locked;
    for a in &senders {
        let l = locked.iter().find(|l| l.net.addr() == ip(a));
        assert_eq!(l.map(|l| l.level), Some(2), "{a}: {locked:?}");
    }
}

/// Issue 21 P6, IPv6: twelve /64s inside one /56 struck their /48, and an address in another
/// /56 of the same /48, which had sent nothing, was locked.
#[test]
fn an_ipv6_network_strike_locks_the_64s_that_sent_not_a_neighbouring_56() {
    let r = rig("[tiers.anon]\nburst = 100\n[networks.prefix]\nburst = 60\nhourly = 100000\n");
    let senders: Vec<String> = (0..12).map(|i| format!("2001:db8:7:1{i:02x}::5")).collect();
    let mut struck = None;
    'rounds: for _ in 0..10 {
        for a in &senders {
            let d = r.get(a, "/");
            if d.action() == Action::Reject {
                struck = Some(d);
                break 'rounds;
            }
        }
    }
    let d = struck.expect("the /48's burst refuses");
    assert_eq!(d.reason(), Some(Reason::Network), "{d:?}");
    let (ips, nets) = kernel_locks(&r);
    let want: BTreeSet<IpAddr> = (0..12)
        .map(|i| format!("2001:db8:7:1{i:02x}::").parse().unwrap())
        .collect();
    assert_eq!(ips, want, "each sender's /64, grouped");
    assert!(nets.is_empty(), "{nets:?}");
    let d = r.get("2001:db8:7:200::9", "/");
    assert_eq!(
        (d.reason(), d.lockout_level),
        (Some(Reason::Network), None),
        "{d:?}"
    );
    assert_eq!(kernel_locks(&r).0, want);
}
