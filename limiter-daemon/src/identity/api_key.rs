//! API key shape: `<prefix>_<8 hex key id>_<20+ url-safe chars>`. The shape is checked before
//! anything else, so a token of the wrong shape never reaches the key cache.

/// The most characters a secret may have (bounds work on hostile input).
pub const MAX_SECRET_LEN: usize = 256;
pub const MIN_SECRET_LEN: usize = 20;

/// A presented key split into its parts; nothing here is verified yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PresentedKey<'a> {
    /// 8 lower-case hex digits.
    pub id: &'a str,
    pub secret: &'a str,
}

/// `Some` when `text` has the key shape for `prefix`.
pub fn parse_key<'a>(text: &'a str, prefix: &str) -> Option<PresentedKey<'a>> {
    let rest = text.strip_prefix(prefix)?.strip_prefix('_')?;
    let (id, secret) = (rest.get(..8)?, rest.get(9..)?);
    if rest.as_bytes().get(8) != Some(&b'_') {
        return None;
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    if secret.len() < MIN_SECRET_LEN
        || secret.len() > MAX_SECRET_LEN
        || !secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return None;
    }
    Some(PresentedKey { id, secret })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape() {
        let good = "rsa_0123abcd_abcdefghijklmnopqrstu";
        assert_eq!(
            parse_key(good, "rsa"),
            Some(PresentedKey {
                id: "0123abcd",
                secret: "abcdefghijklmnopqrstu"
            })
        );
        for bad in [
            "rsa_0123abcd_short",
            "rsa_0123ABCD_abcdefghijklmnopqrstu",
            "rsa_0123abc_abcdefghijklmnopqrstuv",
            "rsb_0123abcd_abcdefghijklmnopqrstu",
            "rsa_0123abcd-abcdefghijklmnopqrstu",
            "rsa_0123abcd_abcdefghijklmnopqrst=",
            "sk-live-abcdefghijklmnopqrstuvwxyz",
            "rsa_",
            "rsa_0123abcd_ääääääääääääääääääääää",
        ] {
            assert_eq!(parse_key(bad, "rsa"), None, "{bad}");
        }
    }
}
