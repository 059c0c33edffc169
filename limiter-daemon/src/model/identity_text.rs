//! [`IdentityText`]: a decision's loggable identity (`ip:3fa2…`), held inline when it fits,
//! so rendering it for every request costs no heap allocation.

use std::ops::Deref;

/// Longest text held inline: the longest namespace (`compat`), a colon, 16 hex digits.
const INLINE: usize = 23;

/// A short immutable string; reads as `&str`, compares with `String` and `&str`.
#[derive(Clone)]
pub struct IdentityText(Repr);

#[derive(Clone)]
enum Repr {
    Inline {
        len: u8,
        buf: [u8; INLINE],
    },
    /// Longer text (only from builders and tests; the engine's identities fit inline).
    Heap(Box<str>),
}

impl IdentityText {
    pub fn new(text: &str) -> Self {
        if text.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..text.len()].copy_from_slice(text.as_bytes());
            IdentityText(Repr::Inline {
                len: text.len() as u8,
                buf,
            })
        } else {
            IdentityText(Repr::Heap(text.into()))
        }
    }

    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Only ever filled from a whole `&str` (see `new`), so this is valid UTF-8.
            Repr::Inline { len, buf } => {
                std::str::from_utf8(&buf[..usize::from(*len)]).unwrap_or_default()
            }
            Repr::Heap(s) => s,
        }
    }
}

impl Deref for IdentityText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for IdentityText {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::borrow::Borrow<str> for IdentityText {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for IdentityText {
    fn from(s: &str) -> Self {
        IdentityText::new(s)
    }
}

impl From<String> for IdentityText {
    fn from(s: String) -> Self {
        IdentityText::new(&s)
    }
}

impl From<IdentityText> for String {
    fn from(t: IdentityText) -> String {
        t.as_str().to_string()
    }
}

impl PartialEq for IdentityText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for IdentityText {}

impl std::hash::Hash for IdentityText {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl PartialEq<str> for IdentityText {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for IdentityText {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for IdentityText {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<IdentityText> for String {
    fn eq(&self, other: &IdentityText) -> bool {
        self == other.as_str()
    }
}

impl std::fmt::Display for IdentityText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for IdentityText {
    // As a `String` prints.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl serde::Serialize for IdentityText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_texts_read_print_and_compare_like_strings() {
        for text in [
            "ip:0123456789abcdef",
            "compat:0123456789abcdef",
            "x".repeat(40).as_str(),
        ] {
            let t = IdentityText::new(text);
            assert_eq!(t, text.to_string());
            assert_eq!(&*t, text);
            assert_eq!(format!("{t:?}"), format!("{text:?}"));
            assert_eq!(t.to_string(), text);
            assert_eq!(
                serde_json::to_string(&t).unwrap(),
                serde_json::to_string(text).unwrap()
            );
        }
        assert!(matches!(
            IdentityText::new("compat:0123456789abcdef").0,
            Repr::Inline { .. }
        ));
    }
}
