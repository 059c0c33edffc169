//! A directory's keys: a JWKS (`{"keys":[...]}`) of Ed25519 `OKP` keys, each named by its
//! JWK thumbprint (RFC 7638), which is what a signature's `keyid` must be (the draft, §4.2).
//! Bounded: at most [`MAX_KEYS`] keys are read; other key types are skipped; the RFC's
//! published test key is refused (anyone holds its private half).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// The most keys one directory may list.
pub const MAX_KEYS: usize = 16;

/// RFC 9421 Appendix B.1.4's `test-key-ed25519` public key (also the draft's example key).
pub const RFC_TEST_KEY_X: &str = "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs";

/// An Ed25519 public key and its thumbprint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentKey {
    pub thumbprint: String,
    pub public: [u8; 32],
}

/// The RFC 7638 thumbprint of an Ed25519 key given its `x` (base64url, no padding): the
/// SHA-256 of `{"crv":"Ed25519","kty":"OKP","x":"…"}`, base64url.
pub fn thumbprint(x: &str) -> String {
    let canonical = format!("{{\"crv\":\"Ed25519\",\"kty\":\"OKP\",\"x\":\"{x}\"}}");
    URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
}

/// Why a directory body was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DirectoryError {
    #[error("not a JWKS: {0}")]
    NotJwks(String),
    #[error("more than {MAX_KEYS} keys")]
    TooManyKeys,
    #[error("the RFC 9421 test key is published; refused")]
    TestKey,
    #[error("no Ed25519 key")]
    NoKeys,
}

#[derive(serde::Deserialize)]
struct Jwks {
    keys: Vec<serde_json::Value>,
}

/// The Ed25519 keys of a directory body. A body listing the RFC test key is refused whole
/// (a directory publishing it is a copy of an example, not an agent).
pub fn parse_directory(body: &[u8]) -> Result<Vec<AgentKey>, DirectoryError> {
    let jwks: Jwks =
        serde_json::from_slice(body).map_err(|e| DirectoryError::NotJwks(e.to_string()))?;
    if jwks.keys.len() > MAX_KEYS {
        return Err(DirectoryError::TooManyKeys);
    }
    let mut out = Vec::new();
    for key in &jwks.keys {
        let field = |n: &str| key.get(n).and_then(|v| v.as_str());
        if field("kty") != Some("OKP") || field("crv") != Some("Ed25519") {
            continue;
        }
        let Some(x) = field("x") else { continue };
        if x == RFC_TEST_KEY_X {
            return Err(DirectoryError::TestKey);
        }
        let Ok(bytes) = URL_SAFE_NO_PAD.decode(x) else {
            continue;
        };
        let Ok(public) = <[u8; 32]>::try_from(bytes.as_slice()) else {
            continue;
        };
        out.push(AgentKey {
            thumbprint: thumbprint(x),
            public,
        });
    }
    if out.is_empty() {
        return Err(DirectoryError::NoKeys);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drafts_thumbprint_of_the_rfc_test_key() {
        // The webbotauth draft's examples use this keyid for test-key-ed25519.
        assert_eq!(
            thumbprint(RFC_TEST_KEY_X),
            "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U"
        );
    }

    #[test]
    fn directories_are_bounded_and_the_test_key_refused() {
        let test =
            format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","x":"{RFC_TEST_KEY_X}"}}]}}"#);
        assert_eq!(
            parse_directory(test.as_bytes()),
            Err(DirectoryError::TestKey)
        );
        let x = URL_SAFE_NO_PAD.encode([7u8; 32]);
        let one = format!(r#"{{"kty":"OKP","crv":"Ed25519","x":"{x}"}}"#);
        let body = format!(r#"{{"keys":[{one},{{"kty":"RSA","n":"AQAB","e":"AQAB"}}]}}"#);
        let keys = parse_directory(body.as_bytes()).unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].thumbprint, thumbprint(&x));
        let many = format!(
            r#"{{"keys":[{}]}}"#,
            vec![one.as_str(); MAX_KEYS + 1].join(",")
        );
        assert_eq!(
            parse_directory(many.as_bytes()),
            Err(DirectoryError::TooManyKeys)
        );
        assert!(matches!(
            parse_directory(b"{"),
            Err(DirectoryError::NotJwks(_))
        ));
        assert_eq!(
            parse_directory(br#"{"keys":[]}"#),
            Err(DirectoryError::NoKeys)
        );
    }
}
