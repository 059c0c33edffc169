//! Who a request is counted as: bearer JWTs (HS256, RS256, EdDSA; `exp` and `nbf` against the
//! injected clock), IPv6 grouping, and malformed input that must leave the caller anonymous.

use crate::rig::*;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use limiter_daemon::engine::{Action, Tier, WindowKind};
use serde_json::json;

const HS_SECRET: &str = "test-secret-of-sufficient-length";

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn hs_config() -> String {
    format!("[jwt]\nalgorithm = \"HS256\"\nsecret = \"{HS_SECRET}\"\n")
}

fn hs_token(claims: serde_json::Value) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(HS_SECRET.as_bytes()),
    )
    .unwrap()
}

fn bearer(t: &str) -> http::HeaderMap {
    headers(&[("authorization", &format!("Bearer {t}"))])
}

#[test]
fn valid_jwt_makes_a_token_holder_counted_per_token_id() {
    let r = rig(&hs_config());
    let exp = r.clock_now() / 1000 + 600;
    let t = hs_token(json!({"sub": "alice", "jti": "token-1", "exp": exp}));
    let a = r.request("198.51.100.1", "GET", "/", &bearer(&t));
    assert_eq!(a.tier, Tier::Session);
    assert!(a.identity.starts_with("tid:"), "{}", a.identity);
    assert_eq!(
        a.window(WindowKind::Daily).unwrap().limit,
        10_000,
        "QUOTA_TOKEN"
    );
    // The same token from another address is the same holder (one counter).
    let b = r.request("198.51.100.2", "GET", "/", &bearer(&t));
    assert_eq!(a.identity, b.identity);
    assert_eq!(b.window(WindowKind::Burst).unwrap().remaining, 298);
    // jti wins over sub; sub is used when there is no jti.
    let other = hs_token(json!({"sub": "alice", "jti": "token-2", "exp": exp}));
    assert_ne!(
        r.request("198.51.100.1", "GET", "/", &bearer(&other))
            .identity,
        a.identity
    );
    let sub_only = hs_token(json!({"sub": "alice", "exp": exp}));
    let s1 = r.request("198.51.100.1", "GET", "/", &bearer(&sub_only));
    let s2 = r.request("198.51.100.3", "GET", "/", &bearer(&sub_only));
    assert_eq!(s1.identity, s2.identity);
    // A verified token raises the address's tier in the kernel.
    assert!(r.sink.events().contains(&SinkEvent::SetTier {
        ip: ip("198.51.100.1"),
        tier: Tier::Session
    }));
}

#[test]
fn expiry_is_checked_against_the_injected_clock() {
    let r = rig(&hs_config());
    let exp = r.clock_now() / 1000 + 60;
    let t = hs_token(json!({"jti": "short-lived", "exp": exp}));
    assert_eq!(
        r.request("198.51.100.10", "GET", "/", &bearer(&t)).tier,
        Tier::Session
    );
    r.advance_secs(59);
    assert_eq!(
        r.request("198.51.100.10", "GET", "/", &bearer(&t)).tier,
        Tier::Session
    );
    r.advance_secs(1);
    let d = r.request("198.51.100.10", "GET", "/", &bearer(&t));
    assert_eq!(d.tier, Tier::Anon, "expired at exp");
    assert!(d.identity.starts_with("ip:"));
    // A token that the system clock would call expired is valid at the injected time.
    let r2 = rig_in(
        &hs_config(),
        tempfile::tempdir().unwrap(),
        1_000_000_000_000,
    );
    let old = hs_token(json!({"jti": "from-2001", "exp": 1_000_000_600u64}));
    assert_eq!(
        r2.request("198.51.100.11", "GET", "/", &bearer(&old)).tier,
        Tier::Session
    );
}

#[test]
fn not_before_is_checked_against_the_injected_clock_with_the_leeway() {
    let r = rig(&format!("{}leeway = \"30s\"\n", hs_config()));
    let now = r.clock_now() / 1000;
    let exp = now + 600;
    // nbf beyond the leeway: not a token holder yet (metered by address).
    let early = hs_token(json!({"jti": "early", "nbf": now + 31, "exp": exp}));
    let d = r.request("198.51.100.12", "GET", "/", &bearer(&early));
    assert_eq!(d.tier, Tier::Anon, "nbf 31 s ahead, leeway 30 s");
    assert!(d.identity.starts_with("ip:"), "{}", d.identity);
    // Within the leeway (issuer's clock a little ahead): accepted.
    let skewed = hs_token(json!({"jti": "skewed", "nbf": now + 30, "exp": exp}));
    let d = r.request("198.51.100.12", "GET", "/", &bearer(&skewed));
    assert_eq!(d.tier, Tier::Session, "nbf 30 s ahead, leeway 30 s");
    assert!(d.identity.starts_with("tid:"), "{}", d.identity);
    // The early token comes into force once the clock reaches nbf − leeway.
    r.advance_secs(1);
    assert_eq!(
        r.request("198.51.100.12", "GET", "/", &bearer(&early)).tier,
        Tier::Session
    );
    // Without leeway, a future nbf is refused and a past one accepted.
    let strict = rig(&hs_config());
    let now = strict.clock_now() / 1000;
    let future = hs_token(json!({"jti": "f", "nbf": now + 1, "exp": now + 600}));
    let past = hs_token(json!({"jti": "p", "nbf": now - 1, "exp": now + 600}));
    assert_eq!(
        strict
            .request("198.51.100.13", "GET", "/", &bearer(&future))
            .tier,
        Tier::Anon
    );
    assert_eq!(
        strict
            .request("198.51.100.13", "GET", "/", &bearer(&past))
            .tier,
        Tier::Session
    );
}

#[test]
fn bad_tokens_leave_the_caller_anonymous() {
    let r = rig(&hs_config());
    let exp = r.clock_now() / 1000 + 600;
    let wrong_key = encode(
        &Header::new(Algorithm::HS256),
        &json!({"jti": "x", "exp": exp}),
        &EncodingKey::from_secret(b"another-secret-entirely-123456"),
    )
    .unwrap();
    let no_exp = hs_token(json!({"jti": "x"}));
    for t in [
        wrong_key.as_str(),
        no_exp.as_str(),
        "abc.def.ghi",
        "not-a-token",
        "",
        "....",
    ] {
        let d = r.request("198.51.100.20", "GET", "/", &bearer(t));
        assert_eq!(d.tier, Tier::Anon, "{t:?}");
        assert_eq!(d.action(), Action::Allow);
    }
    for raw in [
        &b"Bearer \xff\xfe"[..],
        b"Basic dXNlcjpwYXNz",
        b"Bearer",
        b"bearer    ",
    ] {
        let mut h = http::HeaderMap::new();
        h.insert("authorization", http::HeaderValue::from_bytes(raw).unwrap());
        h.insert(
            "cookie",
            http::HeaderValue::from_bytes(b"=;;;\xff").unwrap(),
        );
        h.insert(
            "x-api-key",
            http::HeaderValue::from_bytes(b"\xff\xff").unwrap(),
        );
        let d = r.request("198.51.100.20", "GET", "/", &h);
        assert_eq!(d.tier, Tier::Anon);
    }
}

#[test]
fn rs256_and_eddsa_tokens_verify_with_public_keys_from_files() {
    for (alg, jalg, pubkey, privkey) in [
        (
            "RS256",
            Algorithm::RS256,
            "jwt-rsa.pub.pem",
            "jwt-rsa.key.pem",
        ),
        (
            "EdDSA",
            Algorithm::EdDSA,
            "jwt-ed25519.pub.pem",
            "jwt-ed25519.key.pem",
        ),
    ] {
        let cfg = format!(
            "[jwt]\nalgorithm = \"{alg}\"\npublic_key_file = \"{}\"\ntoken_tier = \"sponsor\"\n",
            fixture(pubkey)
        );
        let r = rig(&cfg);
        let pem = std::fs::read(fixture(privkey)).unwrap();
        let key = if jalg == Algorithm::RS256 {
            EncodingKey::from_rsa_pem(&pem).unwrap()
        } else {
            EncodingKey::from_ed_pem(&pem).unwrap()
        };
        let exp = r.clock_now() / 1000 + 600;
        let t = encode(&Header::new(jalg), &json!({"sub": "svc", "exp": exp}), &key).unwrap();
        let d = r.request("198.51.100.30", "GET", "/", &bearer(&t));
        assert_eq!(d.tier, Tier::Sponsor, "{alg}: configured token tier");
        // An HS256 token signed with the public key's bytes must not pass (algorithm confusion).
        let forged = encode(
            &Header::new(Algorithm::HS256),
            &json!({"sub": "svc", "exp": exp}),
            &EncodingKey::from_secret(&std::fs::read(fixture(pubkey)).unwrap()),
        )
        .unwrap();
        assert_eq!(
            r.request("198.51.100.30", "GET", "/", &bearer(&forged))
                .tier,
            Tier::Anon
        );
    }
}

#[test]
fn ipv6_clients_are_grouped_by_prefix() {
    let r = rig("[identity]\nipv6_prefix = 56\n");
    let a = r.get("2001:db8:0:1100::1", "/");
    let b = r.get("2001:db8:0:11ff:ffff::2", "/");
    let c = r.get("2001:db8:0:1200::1", "/");
    assert_eq!(a.identity, b.identity, "same /56");
    assert_ne!(a.identity, c.identity, "different /56");
    assert_eq!(b.window(WindowKind::Burst).unwrap().remaining, 118);
    // IPv4-mapped and plain IPv4 are one client.
    assert_eq!(
        r.get("::ffff:192.0.2.1", "/").identity,
        r.get("192.0.2.1", "/").identity
    );
}

#[test]
fn forwarded_header_mode_walks_rfc7239() {
    let r =
        rig("[identity]\ntrusted_proxies = [\"10.0.0.0/8\"]\nforwarded_header = \"forwarded\"\n");
    let h = headers(&[(
        "forwarded",
        "for=198.51.100.77;proto=https, for=\"10.0.0.8\"",
    )]);
    assert_eq!(
        r.request("10.0.0.1", "GET", "/", &h).identity,
        r.get("198.51.100.77", "/").identity
    );
    // In this mode X-Forwarded-For is not believed.
    let xff = headers(&[("x-forwarded-for", "198.51.100.78")]);
    assert_eq!(
        r.request("10.0.0.1", "GET", "/", &xff).identity,
        r.get("10.0.0.1", "/").identity
    );
}
