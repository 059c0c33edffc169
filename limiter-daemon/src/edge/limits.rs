//! Limits on a request head, checked before anything else looks at it. hyper enforces a hard
//! ceiling while parsing (answering a bare 431); this check applies the configured, lower limits
//! and answers with a problem document that says which limit was hit.

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};

use crate::edge::render::problem::Problem;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderLimits {
    pub max_count: usize,
    pub max_bytes: usize,
}

/// Which limit a request head broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderLimitError {
    #[error("{count} header fields, more than the {max} accepted")]
    Count { count: usize, max: usize },
    #[error("over {parsed} header fields, more than the {max} accepted")]
    CountOver { parsed: usize, max: usize },
    #[error("{bytes} bytes of header fields, more than the {max} accepted")]
    Bytes { bytes: usize, max: usize },
}

impl HeaderLimits {
    /// Counts fields and bytes (name + value + `": "` + CRLF, as on the wire).
    pub fn check(&self, h: &HeaderMap) -> Result<(), HeaderLimitError> {
        let bytes: usize = h.iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum();
        self.check_sizes(h.len(), bytes)
    }

    /// The same check on counts taken elsewhere (`bytes` as in [`HeaderLimits::check`]).
    pub fn check_sizes(&self, count: usize, bytes: usize) -> Result<(), HeaderLimitError> {
        if count > self.max_count {
            return Err(HeaderLimitError::Count {
                count,
                max: self.max_count,
            });
        }
        if bytes > self.max_bytes {
            return Err(HeaderLimitError::Bytes {
                bytes,
                max: self.max_bytes,
            });
        }
        Ok(())
    }

    /// hyper's parser ceiling on field count, above ours, so our answer (with a body) wins for
    /// moderate excess while a flood is cut off during parsing. `None` keeps hyper's default
    /// (100), which parses into an inline array: any explicit value costs a heap allocation
    /// and an initialisation per request (measured: ~1% of proxy CPU).
    pub fn parser_max_headers(&self) -> Option<usize> {
        const HYPER_DEFAULT: usize = 100;
        (self.max_count >= HYPER_DEFAULT).then(|| self.max_count.saturating_mul(2))
    }
}

/// `431` naming the limit.
pub fn too_large(err: HeaderLimitError) -> Response<Bytes> {
    Problem::new(
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        None,
        format!("Request has {err}; send fewer or smaller header fields."),
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, HeaderValue};

    #[test]
    fn count_and_bytes_are_enforced() {
        let limits = HeaderLimits {
            max_count: 2,
            max_bytes: 40,
        };
        let mut h = HeaderMap::new();
        h.insert(HeaderName::from_static("a"), HeaderValue::from_static("1"));
        h.insert(HeaderName::from_static("b"), HeaderValue::from_static("2"));
        assert_eq!(limits.check(&h), Ok(()));
        h.insert(HeaderName::from_static("c"), HeaderValue::from_static("3"));
        assert_eq!(
            limits.check(&h),
            Err(HeaderLimitError::Count { count: 3, max: 2 })
        );
        let mut big = HeaderMap::new();
        big.insert(
            HeaderName::from_static("x"),
            HeaderValue::from_str(&"v".repeat(50)).unwrap(),
        );
        assert!(matches!(
            limits.check(&big),
            Err(HeaderLimitError::Bytes { bytes: 55, max: 40 })
        ));
    }
}
