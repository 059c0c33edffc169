//! Header fields between Envoy's messages and the engine: the original request's fields read
//! into a [`HeaderMap`] within `[http] max_header_count` / `max_header_bytes` (counted as they
//! are read, so a message with a million entries is refused at the first one over, never
//! built into a map, which would panic past 24,576), and the rate-limit fields of a decision
//! written out as Envoy's `HeaderValue`s.
//!
//! Forwarding fields (`X-Forwarded-For`, `Forwarded`, `X-Real-IP`) are kept: `Check` resolves
//! the client from them as the proxy does, when Envoy's peer is a trusted proxy; a
//! `ShouldRateLimit` caller is already resolved and drops them.

use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction;
use envoy_types::pb::envoy::config::core::v3::{HeaderValue as EnvoyHeader, HeaderValueOption};
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::edge::limits::HeaderLimits;
use crate::surfaces::grpc::invalid::FieldError;

/// Which half of an entry an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Name,
    Value,
}

/// A header map being read from a message, bounded as the proxy bounds a request head.
pub struct Fields {
    map: HeaderMap,
    bytes: usize,
    limits: HeaderLimits,
    /// The message field holding the headers, for errors (`attributes.request.http.headers`).
    field: &'static str,
}

impl Fields {
    pub fn new(limits: HeaderLimits, field: &'static str) -> Self {
        Fields {
            map: HeaderMap::new(),
            bytes: 0,
            limits,
            field,
        }
    }

    /// Adds `name: value`; `at` names the entry's name or value in errors
    /// (`headers.cookie`, `descriptors[0].entries[2].key`).
    pub fn push(
        &mut self,
        name: &str,
        value: &[u8],
        at: impl Fn(Part) -> String,
    ) -> Result<(), FieldError> {
        let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            FieldError::new(at(Part::Name), format!("{name:?} is not a header name"))
        })?;
        let v = HeaderValue::from_bytes(value).map_err(|_| {
            FieldError::new(
                at(Part::Value),
                "the value has characters not allowed in a header",
            )
        })?;
        self.bytes = self.bytes.saturating_add(name.len() + value.len() + 4);
        if self.map.len() >= self.limits.max_count {
            return Err(FieldError::new(
                self.field,
                format!(
                    "more than {} header fields ([http] max_header_count)",
                    self.limits.max_count
                ),
            ));
        }
        if self.bytes > self.limits.max_bytes {
            return Err(FieldError::new(
                self.field,
                format!(
                    "more than {} bytes of header fields ([http] max_header_bytes)",
                    self.limits.max_bytes
                ),
            ));
        }
        // Bounded by `max_header_count` (at most 8192, checked by the config) above.
        self.map.append(n, v);
        Ok(())
    }

    /// Whether `name: value` is already there (the same entry in two descriptors).
    pub fn has(&self, name: &str, value: &[u8]) -> bool {
        self.map.get_all(name).iter().any(|v| v.as_bytes() == value)
    }

    pub fn into_map(self) -> HeaderMap {
        self.map
    }
}

/// `h` as Envoy's header values (the rate-limit service's `response_headers_to_add`).
pub fn header_values(h: &HeaderMap) -> Vec<EnvoyHeader> {
    h.iter()
        .map(|(k, v)| EnvoyHeader {
            key: k.as_str().to_string(),
            value: String::from_utf8_lossy(v.as_bytes()).into_owned(),
            raw_value: Vec::new(),
        })
        .collect()
}

/// `h` as ext_authz header options, each replacing a field of its name (the daemon's fields
/// win over an upstream's of the same name, as on the built-in proxy).
pub fn header_options(h: &HeaderMap) -> Vec<HeaderValueOption> {
    header_values(h)
        .into_iter()
        .map(|header| HeaderValueOption {
            header: Some(header),
            append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
            ..Default::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HeaderLimits = HeaderLimits {
        max_count: 3,
        max_bytes: 64,
    };

    #[test]
    fn fields_are_checked_and_bounded_as_read() {
        let mut f = Fields::new(LIMITS, "headers");
        let at = |p: Part| format!("{p:?}");
        f.push("cookie", b"s=1", at).unwrap();
        let bad = f.push("bad name", b"x", at).unwrap_err();
        assert_eq!(bad.field, "Name");
        let nl = f.push("x", b"a\nb", at).unwrap_err();
        assert_eq!(nl.field, "Value");
        f.push("a", b"1", at).unwrap();
        f.push("b", b"2", at).unwrap();
        let many = f.push("c", b"3", at).unwrap_err();
        assert_eq!(many.field, "headers");
        assert!(many.message.contains("max_header_count"), "{many}");
        let mut g = Fields::new(LIMITS, "headers");
        let big = g.push("x", &[b'v'; 64], at).unwrap_err();
        assert!(big.message.contains("max_header_bytes"), "{big}");
        assert!(f.has("cookie", b"s=1") && !f.has("cookie", b"s=2"));
    }

    #[test]
    fn written_fields_replace_their_names() {
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-remaining", HeaderValue::from_static("2"));
        let o = header_options(&h);
        assert_eq!(o.len(), 1);
        assert_eq!(
            o[0].append_action,
            HeaderAppendAction::OverwriteIfExistsOrAdd as i32
        );
        let hv = o[0].header.as_ref().unwrap();
        assert_eq!(
            (hv.key.as_str(), hv.value.as_str()),
            ("x-ratelimit-remaining", "2")
        );
    }
}
