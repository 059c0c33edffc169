//! Unit tests: RFC 9421's published Ed25519 example, and the draft's checks on signatures
//! made here with a fixed key (the RFC's own key is refused from directories).

use std::net::IpAddr;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use http::{HeaderMap, HeaderValue};
use ring::signature::{Ed25519KeyPair, KeyPair};

use super::base::signature_base;
use super::directory::{DirectoryCache, Fetched, KeyAnswer, MAX_FAILURE_TTL_MS};
use super::*;

/// RFC 9421 B.1.4 `test-key-ed25519`, public half.
const RFC_PUBLIC: &str = "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs";

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

#[test]
fn rfc_9421_b_2_6_verifies_with_the_published_key() {
    let h = headers(&[
        ("date", "Tue, 20 Apr 2021 02:07:55 GMT"),
        ("content-type", "application/json"),
        ("content-length", "18"),
        (
            "signature-input",
            "sig-b26=(\"date\" \"@method\" \"@path\" \"@authority\" \"content-type\" \
             \"content-length\");created=1618884473;keyid=\"test-key-ed25519\"",
        ),
        (
            "signature",
            "sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:",
        ),
    ]);
    let parts = RequestParts {
        method: Some("POST"),
        scheme: Some("https"),
        authority: Some("example.com"),
        path_and_query: Some("/foo?param=Value&Pet=dog"),
        path: None,
        headers: &h,
    };
    // The RFC's example has no web-bot-auth tag: read it as a plain RFC 9421 signature.
    let input = fields::presented(&h);
    assert_eq!(input, Err(fields::FieldError::Malformed), "untagged");
    let si = h["signature-input"].to_str().unwrap().to_owned();
    let dict: sfv::Dictionary = sfv::Parser::new(si.as_str()).parse().unwrap();
    let sfv::ListEntry::InnerList(list) = &dict["sig-b26"] else {
        panic!()
    };
    let p = fields::Presented {
        label: "sig-b26".into(),
        components: list
            .items
            .iter()
            .map(|i| fields::Component {
                name: i.bare_item.as_string().unwrap().as_str().into(),
                key: None,
                serialized: sfv::FieldType::serialize(i),
            })
            .collect(),
        params_text: sfv::FieldType::serialize(&vec![sfv::ListEntry::InnerList(list.clone())])
            .unwrap(),
        created: Some(1618884473),
        expires: None,
        keyid: Some("test-key-ed25519".into()),
        alg: None,
        tag: None,
        nonce: None,
        signature: STANDARD
            .decode("wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==")
            .unwrap(),
    };
    assert_eq!(
        signature_base(&p, &parts).unwrap(),
        "\"date\": Tue, 20 Apr 2021 02:07:55 GMT\n\"@method\": POST\n\"@path\": /foo\n\
         \"@authority\": example.com\n\"content-type\": application/json\n\
         \"content-length\": 18\n\"@signature-params\": (\"date\" \"@method\" \"@path\" \
         \"@authority\" \"content-type\" \"content-length\");created=1618884473\
         ;keyid=\"test-key-ed25519\""
    );
    let public: [u8; 32] = URL_SAFE_NO_PAD
        .decode(RFC_PUBLIC)
        .unwrap()
        .try_into()
        .unwrap();
    assert_eq!(verify::verify_signature(&p, &parts, &public), Ok(()));
    let mut other = p.clone();
    other.signature[0] ^= 1;
    assert_eq!(
        verify::verify_signature(&other, &parts, &public),
        Err(Refusal::Signature)
    );
}

const NOW_S: i64 = 1_800_000_000;
const AGENT: &str = "https://agent.example";
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

/// A request to `example.com` signed by `k` with `params` (after the components).
fn signed(k: &Ed25519KeyPair, components: &str, params: &str, agent: Option<&str>) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Some(a) = agent {
        h.insert("signature-agent", a.parse().unwrap());
    }
    let input = format!("sig1=({components}){params}");
    h.insert("signature-input", input.parse().unwrap());
    h.insert("signature", "sig1=:AAAA:".parse().unwrap());
    // A label not tagged web-bot-auth is never read: it keeps a placeholder signature.
    let Ok(p) = fields::presented(&h) else {
        return h;
    };
    let base = signature_base(&p, &parts(&h)).unwrap();
    let sig = STANDARD.encode(k.sign(base.as_bytes()).as_ref());
    h.insert("signature", format!("sig1=:{sig}:").parse().unwrap());
    h
}

fn parts(h: &HeaderMap) -> RequestParts<'_> {
    RequestParts {
        method: Some("GET"),
        scheme: Some("https"),
        authority: Some("example.com"),
        path_and_query: Some("/"),
        path: None,
        headers: h,
    }
}

/// The draft's parameters, with a nonce of its own each time.
fn params(k: &Ed25519KeyPair, created: i64, expires: i64, tag: &str) -> String {
    static NONCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NONCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    params_with_nonce(k, created, expires, tag, &format!("n{n}"))
}

fn params_with_nonce(k: &Ed25519KeyPair, created: i64, expires: i64, tag: &str, n: &str) -> String {
    let kid = jwk::thumbprint(&x(k));
    format!(
        ";created={created};expires={expires};keyid=\"{kid}\";alg=\"ed25519\";nonce=\"{n}\";tag=\"{tag}\""
    )
}

const COVERED: &str = "\"@authority\" \"signature-agent\"";

#[test]
fn a_signed_agent_settles_to_verified_once_its_directory_lands() {
    let k = key(9);
    let ip: IpAddr = "203.0.113.9".parse().unwrap();
    let cache = DirectoryCache::new();
    let now = NOW_S as u64 * 1000;
    // Dictionary form and the older bare string.
    for agent in [format!("sig1=\"{AGENT}\""), format!("\"{AGENT}\"")] {
        let h = signed(
            &k,
            COVERED,
            &params(&k, NOW_S - 5, NOW_S + 60, TAG),
            Some(&agent),
        );
        if cache.summary().iter().all(|(_, n, _)| *n == 0) {
            let first = verify_request(&parts(&h), &cache, ip, now);
            assert_eq!(first, Outcome::Unverified, "before the directory lands");
            let (dir, source) = cache.next_fetch().expect("a fetch is queued");
            assert_eq!(dir, DIR);
            let fetched = Fetched {
                body: jwks(&k),
                max_age_s: None,
            };
            assert_eq!(cache.landed(&dir, source, Ok(fetched), now), Ok(1));
        }
        assert_eq!(
            verify_request(&parts(&h), &cache, ip, now),
            Outcome::Verified {
                directory: DIR.into()
            },
            "{agent}"
        );
    }
    // @target-uri stands for @authority.
    let h = signed(
        &k,
        "\"@target-uri\" \"signature-agent\"",
        &params(&k, NOW_S, NOW_S + 60, TAG),
        Some(&format!("sig1=\"{AGENT}\"")),
    );
    assert!(matches!(
        verify_request(&parts(&h), &cache, ip, now),
        Outcome::Verified { .. }
    ));
}

#[test]
fn forged_stale_and_misdirected_signatures_are_invalid() {
    let k = key(9);
    let cache = DirectoryCache::new();
    let now = NOW_S as u64 * 1000;
    let source: IpAddr = "198.51.100.1".parse().unwrap();
    cache.key(DIR, "x", source, now);
    let (dir, src) = cache.next_fetch().unwrap();
    cache
        .landed(
            &dir,
            src,
            Ok(Fetched {
                body: jwks(&k),
                max_age_s: None,
            }),
            now,
        )
        .unwrap();
    let agent = format!("sig1=\"{AGENT}\"");
    let other = key(10);
    let mut tampered = signed(
        &k,
        COVERED,
        &params(&k, NOW_S, NOW_S + 60, TAG),
        Some(&agent),
    );
    tampered.insert(
        "signature-agent",
        "sig1=\"https://agent.example/\"".parse().unwrap(),
    );
    let cases: Vec<(&str, HeaderMap, Refusal)> = vec![
        ("tampered", tampered, Refusal::Signature),
        (
            "expired",
            signed(
                &k,
                COVERED,
                &params(&k, NOW_S - 120, NOW_S - 60, TAG),
                Some(&agent),
            ),
            Refusal::Expired,
        ),
        (
            "future created",
            signed(
                &k,
                COVERED,
                &params(&k, NOW_S + 600, NOW_S + 900, TAG),
                Some(&agent),
            ),
            Refusal::FutureCreated,
        ),
        (
            "living longer than 5 minutes",
            signed(
                &k,
                COVERED,
                &params(&k, NOW_S, NOW_S + 301, TAG),
                Some(&agent),
            ),
            Refusal::TooLong,
        ),
        (
            "created more than 5 minutes ago",
            signed(
                &k,
                COVERED,
                &params(&k, NOW_S - 301, NOW_S + 60, TAG),
                Some(&agent),
            ),
            Refusal::Stale,
        ),
        (
            "wrong tag",
            signed(
                &k,
                COVERED,
                &params(&k, NOW_S, NOW_S + 60, "web-bot-auth-x"),
                Some(&agent),
            ),
            Refusal::Malformed,
        ),
        (
            "no @authority",
            signed(
                &k,
                "\"signature-agent\"",
                &params(&k, NOW_S, NOW_S + 60, TAG),
                Some(&agent),
            ),
            Refusal::NoAuthority,
        ),
        (
            "agent not covered",
            signed(
                &k,
                "\"@authority\"",
                &params(&k, NOW_S, NOW_S + 60, TAG),
                Some(&agent),
            ),
            Refusal::AgentNotCovered,
        ),
        (
            "key from another directory",
            signed(
                &other,
                COVERED,
                &params(&other, NOW_S, NOW_S + 60, TAG),
                Some(&agent),
            ),
            Refusal::UnknownKey,
        ),
    ];
    for (i, (name, h, refusal)) in cases.into_iter().enumerate() {
        let ip: IpAddr = format!("192.0.2.{}", i + 1).parse().unwrap();
        assert_eq!(
            verify_request(&parts(&h), &cache, ip, now),
            Outcome::Invalid(refusal),
            "{name}"
        );
        // The same address is refused without more work, even with a good signature.
        let good = signed(
            &k,
            COVERED,
            &params(&k, NOW_S, NOW_S + 60, TAG),
            Some(&agent),
        );
        assert_eq!(
            verify_request(&parts(&good), &cache, ip, now),
            Outcome::Invalid(Refusal::Refused),
            "{name}"
        );
    }
    // A refused address queues no directory fetch for an unknown agent.
    let ip: IpAddr = "192.0.2.1".parse().unwrap();
    let h = signed(
        &other,
        COVERED,
        &params(&other, NOW_S, NOW_S + 60, TAG),
        Some("sig1=\"https://new.example\""),
    );
    verify_request(&parts(&h), &cache, ip, now);
    assert_eq!(cache.next_fetch(), None);
    // Unsigned requests are not signature outcomes at all.
    assert_eq!(
        verify_request(&parts(&HeaderMap::new()), &cache, ip, now),
        Outcome::None
    );
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
fn directory_urls_are_https_origins() {
    assert_eq!(directory_url(AGENT).as_deref(), Some(DIR));
    assert_eq!(
        directory_url("https://Agent.Example:443/").as_deref(),
        Some(DIR)
    );
    assert_eq!(
        directory_url("https://a.example/keys.json").as_deref(),
        Some("https://a.example/keys.json")
    );
    for bad in [
        "http://agent.example",
        "agent.example",
        "https://u@agent.example",
        "",
    ] {
        assert_eq!(directory_url(bad), None, "{bad}");
    }
}

/// A directory holding `k`'s key, landed at `now`.
fn cache_with(k: &Ed25519KeyPair, now: u64) -> DirectoryCache {
    let cache = DirectoryCache::new();
    let fetched = Fetched {
        body: jwks(k),
        max_age_s: None,
    };
    cache
        .landed(DIR, "192.0.2.200".parse().unwrap(), Ok(fetched), now)
        .unwrap();
    cache
}

#[test]
fn a_signature_lives_at_most_the_configured_lifetime() {
    let k = key(9);
    let now = NOW_S as u64 * 1000;
    let cache = cache_with(&k, now);
    let agent = format!("sig1=\"{AGENT}\"");
    let ip: IpAddr = "192.0.2.1".parse().unwrap();
    let verify = |created, expires, lifetime| {
        let h = signed(
            &k,
            COVERED,
            &params(&k, created, expires, TAG),
            Some(&agent),
        );
        let policy = Policy {
            max_lifetime_s: lifetime,
            ..Policy::default()
        };
        check_request(&parts(&h), &cache, ip, now, &policy, |_| true).outcome
    };
    let verified = Outcome::Verified {
        directory: DIR.into(),
    };
    assert_eq!(verify(NOW_S, NOW_S + 300, 300), verified, "5 minutes");
    assert_eq!(verify(NOW_S - 300, NOW_S, 300), verified, "5 minutes old");
    assert_eq!(
        verify(NOW_S, NOW_S + 301, 300),
        Outcome::Invalid(Refusal::TooLong)
    );
    // A refused address would be refused from here on: each case from its own cache.
    let cache2 = cache_with(&k, now);
    let h = signed(
        &k,
        COVERED,
        &params(&k, NOW_S - 301, NOW_S + 1, TAG),
        Some(&agent),
    );
    assert_eq!(
        check_request(&parts(&h), &cache2, ip, now, &Policy::default(), |_| true).outcome,
        Outcome::Invalid(Refusal::Stale)
    );
    // What an operator configures: an hour-long signature under `max_signature_lifetime = "1h"`.
    let cache3 = cache_with(&k, now);
    let h = signed(
        &k,
        COVERED,
        &params(&k, NOW_S - 1800, NOW_S + 1800, TAG),
        Some(&agent),
    );
    let hour = Policy {
        max_lifetime_s: 3600,
        ..Policy::default()
    };
    assert_eq!(
        check_request(&parts(&h), &cache3, ip, now, &hour, |_| true).outcome,
        verified
    );
}

#[test]
fn a_nonce_verifies_once_and_a_repeat_is_replayed_not_refused() {
    let k = key(9);
    let now = NOW_S as u64 * 1000;
    let cache = cache_with(&k, now);
    let agent = format!("sig1=\"{AGENT}\"");
    let p = params_with_nonce(&k, NOW_S, NOW_S + 60, TAG, "abc");
    let h = signed(&k, COVERED, &p, Some(&agent));
    let first: IpAddr = "203.0.113.1".parse().unwrap();
    let replayer: IpAddr = "198.51.100.1".parse().unwrap();
    assert_eq!(
        verify_request(&parts(&h), &cache, first, now),
        Outcome::Verified {
            directory: DIR.into()
        }
    );
    // The captured copy, from elsewhere, a second later: not verified, counted `replayed`.
    let replayed = verify_request(&parts(&h), &cache, replayer, now + 1000);
    assert_eq!(replayed, Outcome::Replayed);
    assert_eq!(replayed.label(), Some("replayed"));
    // ...and from the agent's own address (a retry not signed again): the same.
    assert_eq!(
        verify_request(&parts(&h), &cache, first, now + 2000),
        Outcome::Replayed
    );
    // Not refused for it: a fresh signature from the replayer's address verifies.
    let fresh = signed(
        &k,
        COVERED,
        &params(&k, NOW_S, NOW_S + 60, TAG),
        Some(&agent),
    );
    assert!(matches!(
        verify_request(&parts(&fresh), &cache, replayer, now + 3000),
        Outcome::Verified { .. }
    ));
    assert_eq!(cache.nonces().len(), 2);
    // A forged signature with a seen nonce is invalid, not replayed (verified first).
    let mut forged = h.clone();
    forged.insert("signature", "sig1=:AAAA:".parse().unwrap());
    assert_eq!(
        verify_request(
            &parts(&forged),
            &cache,
            "192.0.2.9".parse().unwrap(),
            now + 4000
        ),
        Outcome::Invalid(Refusal::Signature)
    );
    // Without nonces (a dry run): verified, nothing remembered.
    let dry = Policy {
        nonces: false,
        ..Policy::default()
    };
    let other = "192.0.2.10".parse().unwrap();
    assert!(matches!(
        check_request(&parts(&h), &cache, other, now + 5000, &dry, |_| true).outcome,
        Outcome::Verified { .. }
    ));
    assert_eq!(cache.nonces().len(), 2);
}

#[test]
fn past_the_nonce_capacity_a_new_nonce_is_unverified() {
    let k = key(9);
    let now = NOW_S as u64 * 1000;
    let cache = cache_with(&k, now);
    let agent = format!("sig1=\"{AGENT}\"");
    let ip: IpAddr = "203.0.113.1".parse().unwrap();
    let two = Policy {
        nonce_capacity: 2,
        ..Policy::default()
    };
    let outcome = |h: &HeaderMap| check_request(&parts(h), &cache, ip, now, &two, |_| true).outcome;
    let sign = || {
        signed(
            &k,
            COVERED,
            &params(&k, NOW_S, NOW_S + 60, TAG),
            Some(&agent),
        )
    };
    assert!(matches!(outcome(&sign()), Outcome::Verified { .. }));
    assert!(matches!(outcome(&sign()), Outcome::Verified { .. }));
    assert_eq!(outcome(&sign()), Outcome::Unverified, "full: fails closed");
    // A signature without a nonce is not limited by it (and can be replayed in its life).
    let plain = signed(
        &k,
        COVERED,
        &format!(
            ";created={NOW_S};expires={};keyid=\"{}\";tag=\"{TAG}\"",
            NOW_S + 60,
            jwk::thumbprint(&x(&k))
        ),
        Some(&agent),
    );
    assert!(matches!(outcome(&plain), Outcome::Verified { .. }));
    assert!(matches!(outcome(&plain), Outcome::Verified { .. }));
}

#[test]
fn covered_path_and_authority_must_be_this_requests() {
    let k = key(9);
    let now = NOW_S as u64 * 1000;
    let agent = format!("sig1=\"{AGENT}\"");
    let with_path = "\"@authority\" \"@path\" \"@method\" \"signature-agent\"";
    let h = signed(
        &k,
        with_path,
        &params(&k, NOW_S, NOW_S + 60, TAG),
        Some(&agent),
    );
    let request = |method, authority, path| RequestParts {
        method: Some(method),
        scheme: Some("https"),
        authority: Some(authority),
        path_and_query: Some(path),
        path: None,
        headers: &h,
    };
    for (n, (what, parts, want)) in [
        (
            "another path",
            request("GET", "example.com", "/admin"),
            Some(Refusal::Signature),
        ),
        (
            "another host",
            request("GET", "other.example", "/"),
            Some(Refusal::Signature),
        ),
        (
            "another method",
            request("POST", "example.com", "/"),
            Some(Refusal::Signature),
        ),
        ("its own", request("GET", "example.com", "/?q=1"), None),
    ]
    .into_iter()
    .enumerate()
    {
        // Each from its own cache and address: an invalid one refuses its address.
        let cache = cache_with(&k, now);
        let ip: IpAddr = format!("192.0.2.{}", n + 1).parse().unwrap();
        let got = verify_request(&parts, &cache, ip, now);
        match want {
            Some(r) => assert_eq!(got, Outcome::Invalid(r), "{what}"),
            None => assert!(matches!(got, Outcome::Verified { .. }), "{what}: {got:?}"),
        }
    }
}

#[test]
fn a_flood_of_junk_directories_never_shuts_a_new_agent_out() {
    use super::directory::{MAX_DIRECTORIES, MAX_PENDING_PER_NETWORK, MAX_PENDING_PER_SOURCE};
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
