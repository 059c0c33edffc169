//! The directory cache alone: freshness and failures, what a flood of junk directories
//! leaves room for, and how fetches are handed out.

use std::net::IpAddr;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::signature::{Ed25519KeyPair, KeyPair};

use super::*;
use crate::identity::web_bot_auth::jwk;

const NOW_S: i64 = 1_800_000_000;
const DIR: &str = "https://agent.example/.well-known/http-message-signatures-directory";

fn key(seed: u8) -> Ed25519KeyPair {
    Ed25519KeyPair::from_seed_unchecked(&[seed; 32]).unwrap()
}

fn x(k: &Ed25519KeyPair) -> String {
    URL_SAFE_NO_PAD.encode(k.public_key().as_ref())
}

fn jwks(k: &Ed25519KeyPair) -> Vec<u8> {
    format!(
        r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","x":"{}"}}]}}"#,
        x(k)
    )
    .into_bytes()
}

#[test]
fn failures_back_off_at_most_five_minutes_and_keep_keys_and_max_age_is_honoured() {
    let k = key(9);
    let cache = DirectoryCache::new();
    let ip: IpAddr = "203.0.113.1".parse().unwrap();
    let t0 = NOW_S as u64 * 1000;
    let kid = jwk::thumbprint(&x(&k));
    assert_eq!(cache.key(DIR, &kid, ip, t0), KeyAnswer::Pending);
    let (d, s) = cache.next_fetch().unwrap();
    let ok = |age| {
        Ok(Fetched {
            body: jwks(&k),
            max_age_s: Some(age),
        })
    };
    cache.landed(&d, s, ok(600), t0).unwrap();
    // Fresh for max-age: no refetch at 599 s, one at 600 s.
    assert!(matches!(
        cache.key(DIR, &kid, ip, t0 + 599_000),
        KeyAnswer::Key(_)
    ));
    assert_eq!(cache.next_fetch(), None);
    assert!(matches!(
        cache.key(DIR, &kid, ip, t0 + 600_000),
        KeyAnswer::Key(_)
    ));
    let (d, s) = cache.next_fetch().expect("stale: refetched");
    // The refetch fails: keys stay, and no new fetch before 5 minutes.
    let t1 = t0 + 600_000;
    assert!(cache.landed(&d, s, Err("status 500".into()), t1).is_err());
    assert!(matches!(
        cache.key(DIR, &kid, ip, t1 + 1),
        KeyAnswer::Key(_)
    ));
    assert!(matches!(
        cache.key(DIR, &kid, ip, t1 + MAX_FAILURE_TTL_MS - 1),
        KeyAnswer::Key(_)
    ));
    assert_eq!(cache.next_fetch(), None);
    cache.key(DIR, &kid, ip, t1 + MAX_FAILURE_TTL_MS);
    let (d, s) = cache
        .next_fetch()
        .expect("retried after the failure's 5 minutes");
    // A broken body is a failure too, and keeps the keys.
    let broken = Ok(Fetched {
        body: b"{".to_vec(),
        max_age_s: None,
    });
    assert!(cache
        .landed(&d, s, broken, t1 + MAX_FAILURE_TTL_MS)
        .is_err());
    assert!(matches!(
        cache.key(DIR, &kid, ip, t1 + MAX_FAILURE_TTL_MS + 1),
        KeyAnswer::Key(_)
    ));
    assert_eq!(cache.summary()[0].1, 1);
}

#[test]
fn a_flood_of_junk_directories_never_shuts_a_new_agent_out() {
    let cache = DirectoryCache::new();
    let now = NOW_S as u64 * 1000;
    let flooder: IpAddr = "203.0.113.66".parse().unwrap();
    // Each junk fetch fails at once, so one address goes through thousands.
    for i in 0..MAX_DIRECTORIES + 200 {
        cache.request_fetch(&format!("https://junk{i}.example/d"), flooder, now);
        let (d, s) = cache.next_fetch().expect("queued");
        assert!(cache.landed(&d, s, Err("refused".into()), now).is_err());
    }
    assert_eq!(
        cache.summary().len(),
        MAX_DIRECTORIES,
        "held entries are bounded"
    );
    // A held agent survives the flood; a new agent is queued and lands.
    let k = key(9);
    let agent: IpAddr = "198.51.100.5".parse().unwrap();
    cache.request_fetch(DIR, agent, now);
    let (d, s) = cache.next_fetch().expect("the new agent is queued");
    assert_eq!(d, DIR);
    let fetched = Fetched {
        body: jwks(&k),
        max_age_s: None,
    };
    cache.landed(&d, s, Ok(fetched), now).unwrap();
    for i in 0..MAX_DIRECTORIES + 200 {
        cache.request_fetch(&format!("https://more{i}.example/d"), flooder, now);
        let (d, s) = cache.next_fetch().expect("queued");
        let _ = cache.landed(&d, s, Err("refused".into()), now);
    }
    let kid = jwk::thumbprint(&x(&k));
    assert!(
        matches!(cache.peek(DIR, &kid, now).0, KeyAnswer::Key(_)),
        "entries with keys give way last"
    );
    // What one address, and one network, may have queued at once.
    for i in 0..10 {
        cache.request_fetch(&format!("https://q{i}.example/d"), flooder, now);
    }
    let mut queued = 0;
    while cache.next_fetch().is_some() {
        queued += 1;
    }
    assert_eq!(queued, MAX_PENDING_PER_SOURCE);
    let cache = DirectoryCache::new();
    for i in 0..10u8 {
        let neighbour = IpAddr::from([203, 0, 113, i]);
        cache.request_fetch(&format!("https://n{i}.example/d"), neighbour, now);
    }
    let mut queued = 0;
    while cache.next_fetch().is_some() {
        queued += 1;
    }
    assert_eq!(queued, MAX_PENDING_PER_NETWORK, "one /24");
}

#[test]
fn fetches_are_handed_out_at_most_two_to_a_host() {
    let cache = DirectoryCache::new();
    let now = NOW_S as u64 * 1000;
    for i in 0..4u8 {
        let ip = IpAddr::from([192, 0, i, 1]);
        cache.request_fetch(
            &format!("https://slow.example:{}/d", 1000 + u16::from(i)),
            ip,
            now,
        );
    }
    cache.request_fetch(DIR, "198.51.100.1".parse().unwrap(), now);
    let a = cache.next_fetch().unwrap();
    let b = cache.next_fetch().unwrap();
    let c = cache.next_fetch().unwrap();
    assert!(a.0.contains("slow") && b.0.contains("slow"));
    assert_eq!(c.0, DIR, "past two to one host, the next host's");
    assert_eq!(cache.next_fetch(), None);
    let _ = cache.landed(&a.0, a.1, Err("timed out".into()), now);
    assert!(
        cache.next_fetch().unwrap().0.contains("slow"),
        "a slot freed"
    );
}
