//! The rules that keep a captured signature from being worth much: a short life, a nonce
//! that verifies once, and the components it covers bound to this request.

use super::*;

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
