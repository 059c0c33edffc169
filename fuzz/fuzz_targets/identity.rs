//! The identity resolver (`IdentityResolver::resolve`: request fields and peer to a caller) on
//! arbitrary fields, under configs built once: an HS256 JWT secret, a key header, trusted
//! proxies, either forwarding header.
//!
//! Input: a flags byte (bit 0: `Forwarded` instead of `X-Forwarded-For`; bit 1: sign the
//! `x-fuzz-claims` field's JSON with the configured secret and send it as the bearer token, so
//! the claim checks are reached past the signature), then lines: the first is the peer address
//! (a fixed trusted one when it does not parse), every other is `name: value`.
//!
//! Besides "never panics":
//! - the resolver reads only the fields `identity::reads_header` names: resolving with those
//!   alone gives the same caller (the own loop hands the decision nothing else);
//! - an untrusted peer is the client whatever its fields say; a client address other than the
//!   peer needs a trusted peer and the forwarding field; the group is the client address
//!   grouped by the configured prefix;
//! - malformed, unknown and revoked credentials never elevate: without a verified key or token
//!   the tier is what the session cookie gives; a pending key gets at most one rung below a key;
//! - a verified key is exactly one the store holds, presented with its secret, at its tier;
//!   once the lookups have landed nothing is pending;
//! - an accepted token has not expired, and is counted by its `jti`, else `sub`, else signature.
#![no_main]

use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use limiter_daemon::config::{Config, EnvMap};
use limiter_daemon::identity::client_ip::{client, group, normalize};
use limiter_daemon::identity::hash::IdentityHasher;
use limiter_daemon::identity::key_cache::LookupFailed;
use limiter_daemon::identity::key_cache::{KeyCache, KeyLookup};
use limiter_daemon::identity::session::has_session_cookie;
use limiter_daemon::identity::web_bot_auth::directory::DirectoryCache;
use limiter_daemon::identity::{reads_header, Caller, IdentityResolver, Subject};
use limiter_daemon::model::KeyRecord;
use limiter_daemon::model::{KeyStatus, Tier};

const SECRET: &str = "fuzz-jwt-secret-0123456789abcdef";
const NOW_MS: u64 = 1_800_000_000_000;
/// Keys the store holds: (id, secret, tier, revoked).
const KEYS: [(&str, &str, Tier, bool); 3] = [
    (
        "0123abcd",
        "sponsorsecret_AAAAAAAAAAAA",
        Tier::Sponsor,
        false,
    ),
    (
        "0badc0de",
        "revokedsecret_BBBBBBBBBBBB",
        Tier::Sponsor,
        true,
    ),
    (
        "5e55104a",
        "sessionsecret_CCCCCCCCCCCC",
        Tier::Session,
        false,
    ),
];

struct Store(IdentityHasher);

impl KeyLookup for Store {
    fn lookup_key(&self, id: &str) -> Result<Option<KeyRecord>, LookupFailed> {
        Ok(KEYS
            .iter()
            .find(|k| k.0 == id)
            .map(|&(id, secret, tier, revoked)| KeyRecord {
                id: id.to_string(),
                secret_hash: hex(&self.0.secret_hash(secret)),
                tier,
                hourly_limit: 5_000,
                owner: None,
                note: None,
                created_ms: 0,
                revoked_ms: revoked.then_some(1),
            }))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

struct Rig {
    cfg: Config,
    resolver: IdentityResolver,
    hasher: IdentityHasher,
}

fn rig(forwarded: bool) -> &'static Rig {
    static XFF: OnceLock<Rig> = OnceLock::new();
    static FWD: OnceLock<Rig> = OnceLock::new();
    let cell = if forwarded { &FWD } else { &XFF };
    cell.get_or_init(|| {
        let text = format!(
            "[identity]\ntrusted_proxies = [\"10.0.0.0/8\", \"2001:db8:ffff::/48\", \"192.0.2.1\"]\n\
             forwarded_header = \"{}\"\nipv6_prefix = 56\n\
             [keys]\nheader = \"x-api-key\"\n\
             [jwt]\nalgorithm = \"HS256\"\nsecret = \"{SECRET}\"\nleeway = \"30s\"\n\
             token_tier = \"session\"\n",
            if forwarded { "forwarded" } else { "x-forwarded-for" }
        );
        let cfg = Config::from_toml_str(&text, Path::new("fuzz.toml"), &EnvMap::new())
            .expect("the fuzz config is valid");
        Rig {
            resolver: IdentityResolver::new(&cfg),
            hasher: IdentityHasher::hmac(b"fuzz-hash-secret"),
            cfg,
        }
    })
}

fn sign(claims: &[u8]) -> Option<String> {
    let claims: serde_json::Value = serde_json::from_slice(claims).ok()?;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .ok()
}

fn resolve(rig: &Rig, keys: &KeyCache, peer: IpAddr, headers: &HeaderMap) -> Caller {
    // Agents are off in this config (`[agents]` unset): no directory is ever asked.
    let agents = DirectoryCache::new();
    // The client as a surface resolves it where the request comes in, then the caller.
    let client = client(peer, headers, &rig.cfg.identity);
    let caller = rig
        .resolver
        .resolve(&rig.cfg, keys, &agents, client, "GET", "/", headers, NOW_MS, true);
    // The store key is derived without trouble whatever the subject.
    let _ = caller.id_key(&rig.hasher);
    caller
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let rig = rig(flags & 1 != 0);
    let mut lines = rest.split(|&b| b == b'\n');
    let peer_line = lines.next().unwrap_or_default();
    let peer: IpAddr = std::str::from_utf8(peer_line)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| "10.1.2.3".parse().unwrap());
    let mut headers = HeaderMap::new();
    let mut claims = None;
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"x-fuzz-claims") {
            claims = Some(value);
            continue;
        }
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            headers.append(n, v);
        }
    }
    let mut signed = None;
    if let (true, Some(c)) = (flags & 2 != 0, claims) {
        if let Some(token) = sign(c) {
            headers.insert(
                http::header::AUTHORIZATION,
                HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
            );
            signed = Some(token);
        }
    }

    let keys = KeyCache::new(
        Arc::new(Store(rig.hasher.clone())),
        rig.hasher.clone(),
        &rig.cfg.keys,
    );
    let first = resolve(rig, &keys, peer, &headers);
    check(rig, peer, &headers, &first, signed.as_deref());

    // Only the fields `reads_header` names matter.
    let mut read_only = HeaderMap::new();
    for (name, value) in &headers {
        if reads_header(&rig.cfg, name.as_str().as_bytes()) {
            read_only.append(name.clone(), value.clone());
        }
    }
    assert_eq!(
        resolve(rig, &keys, peer, &read_only),
        first,
        "the caller depends on a field reads_header does not name"
    );

    // Once the lookups have landed, a presented key is known or not: never pending.
    keys.process_pending(NOW_MS);
    let settled = resolve(rig, &keys, peer, &headers);
    check(rig, peer, &headers, &settled, signed.as_deref());
    assert_ne!(settled.key_status, Some(KeyStatus::Pending));
    assert_eq!((settled.ip, settled.group), (first.ip, first.group));
});

fn check(rig: &Rig, peer: IpAddr, headers: &HeaderMap, caller: &Caller, signed: Option<&str>) {
    let id = &rig.cfg.identity;
    let peer_n = normalize(peer);
    let trusted = id.trusted_proxies.iter().any(|n| n.contains(&peer_n));
    if !trusted {
        assert_eq!(
            caller.ip, peer_n,
            "an untrusted peer's fields moved the client"
        );
    }
    if caller.ip != peer_n {
        assert!(headers.contains_key(id.forwarded_header.as_str()));
    }
    assert_eq!(caller.group, group(caller.ip, id.ipv6_prefix));

    let cookie = has_session_cookie(headers, &id.session_cookie);
    let base = if cookie { Tier::Session } else { Tier::Anon };
    match &caller.subject {
        Subject::Agent(_) => panic!("a signed agent without [agents] enabled"),
        Subject::Unattributed => {
            // Only a trusted proxy's field can name no client, and it names no one: the caller
            // is the proxy's shared anonymous identity, whatever credential-less fields it sent.
            assert!(trusted, "an untrusted peer's request was unattributed");
            assert!(headers.contains_key(id.forwarded_header.as_str()));
            assert_eq!(
                caller.tier,
                Tier::Anon,
                "an unattributed caller was elevated"
            );
            assert!(caller.crawler.is_none());
            assert!(!caller.counts_against_networks());
            assert!(!caller.may_be_struck());
        }
        Subject::Ip => {
            let expected = if caller.key_status == Some(KeyStatus::Pending) {
                base.max(Tier::Sponsor.below())
            } else {
                base
            };
            assert_eq!(caller.tier, expected, "elevated without a credential");
            assert_ne!(caller.key_status, Some(KeyStatus::Verified));
        }
        Subject::Key(record) => {
            assert_eq!(caller.key_status, Some(KeyStatus::Verified));
            let &(kid, secret, tier, revoked) = KEYS
                .iter()
                .find(|k| k.0 == record.id)
                .expect("a key the store holds");
            assert!(!revoked, "a revoked key verified");
            assert_eq!(caller.tier, tier);
            let presented = format!("{}_{kid}_{secret}", rig.cfg.keys.prefix);
            let in_header = headers
                .get(&rig.cfg.keys.header)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.trim() == presented);
            let in_bearer = limiter_daemon::identity::jwt::bearer(headers) == Some(&presented);
            assert!(in_header || in_bearer, "verified without its secret");
        }
        Subject::Token(token_id) => {
            let token = limiter_daemon::identity::jwt::bearer(headers).expect("a bearer token");
            let jwt = rig.cfg.jwt.as_ref().unwrap();
            assert_eq!(caller.tier, base.max(jwt.token_tier));
            assert_ne!(caller.key_status, Some(KeyStatus::Verified));
            // The fuzzer cannot sign; only the harness's own tokens can verify.
            let Some(signed) = signed else {
                panic!("an unsigned token verified: {token}")
            };
            assert_eq!(token, signed);
            let payload = token.split('.').nth(1).unwrap();
            let claims: serde_json::Value = serde_json::from_slice(&b64url(payload)).unwrap();
            let exp = claims["exp"].as_f64().expect("exp is a number");
            let leeway_ms = jwt.leeway.as_millis() as f64;
            assert!(
                exp * 1000.0 + leeway_ms > NOW_MS as f64,
                "expired token accepted"
            );
            let named = |k: &str| {
                claims
                    .get(k)
                    .and_then(|v| v.as_str())
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
            };
            let expected = named("jti")
                .or_else(|| named("sub"))
                .unwrap_or_else(|| token.rsplit('.').next().unwrap().to_string());
            assert_eq!(token_id, &expected);
        }
    }
}

fn b64url(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .expect("a JWT segment")
}
