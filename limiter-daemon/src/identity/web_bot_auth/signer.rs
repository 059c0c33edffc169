//! A minimal web-bot-auth signer (Ed25519, ring) over the same signature base the verifier
//! rebuilds: for benches and for tests that need signatures an outside signer will not make
//! (expired, wrong tag, components left out). That outside signers verify is tested with
//! Cloudflare's own (`tests/agents/agent_signer_npm.rs`).

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use http::{HeaderMap, HeaderValue};
use ring::signature::{Ed25519KeyPair, KeyPair};

use super::base::{signature_base, RequestParts};
use super::{fields, jwk};

/// A key's JWK `x` (the public key, base64url) and its directory document.
pub fn directory_of(key: &Ed25519KeyPair) -> (String, String) {
    let x = URL_SAFE_NO_PAD.encode(key.public_key().as_ref());
    let doc = format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","x":"{x}"}}]}}"#);
    (x, doc)
}

/// The draft's parameters: `created`, `expires`, the key's thumbprint as `keyid`, `tag`.
pub fn params(key: &Ed25519KeyPair, created: i64, expires: i64, tag: &str) -> String {
    let (x, _) = directory_of(key);
    format!(
        ";created={created};expires={expires};keyid=\"{}\";tag=\"{tag}\"",
        jwk::thumbprint(&x)
    )
}

/// Signs a GET to `authority` with `key` as label `sig1`: `Signature-Agent` naming `agent`
/// (dictionary form), `components` covered (`"@authority" "signature-agent"`), `params` as
/// [`params`] makes them. Returns the three fields.
pub fn sign(
    key: &Ed25519KeyPair,
    agent: &str,
    authority: &str,
    components: &str,
    params: &str,
) -> HeaderMap {
    sign_path(key, agent, authority, None, components, params)
}

/// [`sign`] for a GET of `path` (for signatures covering `@path`; `None`: no path, and such a
/// signature cannot be made).
pub fn sign_path(
    key: &Ed25519KeyPair,
    agent: &str,
    authority: &str,
    path: Option<&str>,
    components: &str,
    params: &str,
) -> HeaderMap {
    let mut h = HeaderMap::new();
    let field = |s: String| HeaderValue::from_str(&s).expect("a field value");
    h.insert("host", field(authority.to_owned()));
    h.insert("signature-agent", field(format!("sig1=\"{agent}\"")));
    h.insert(
        "signature-input",
        field(format!("sig1=({components}){params}")),
    );
    h.insert("signature", field("sig1=:AAAA:".to_owned()));
    let signature = fields::presented(&h)
        .ok()
        .and_then(|p| {
            signature_base(
                &p,
                &RequestParts {
                    method: Some("GET"),
                    scheme: None,
                    authority: Some(authority),
                    path_and_query: path,
                    path: None,
                    headers: &h,
                },
            )
        })
        .map_or_else(
            // Components the base cannot rebuild: any signature will do, none verifies.
            || "AAAA".to_owned(),
            |b| STANDARD.encode(key.sign(b.as_bytes()).as_ref()),
        );
    h.insert("signature", field(format!("sig1=:{signature}:")));
    h
}
