//! Unit tests: RFC 9421's published Ed25519 example, and the draft's checks on signatures
//! made here with a fixed key (the RFC's own key is refused from directories).

use std::net::IpAddr;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use http::{HeaderMap, HeaderValue};
use ring::signature::{Ed25519KeyPair, KeyPair};

use super::base::signature_base;
use super::directory::{DirectoryCache, Fetched};
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

mod replay;
