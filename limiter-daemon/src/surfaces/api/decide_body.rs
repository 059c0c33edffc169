//! The `/v1/decide` body, parsed within bounds: `{"ip", "method", "path", "headers"}` into a
//! [`Described`] request, or a [`DescribeError`] naming the field.
//!
//! The body is read in one streaming pass straight into borrowed strings: no
//! `serde_json::Value` tree (10–20× the body in memory), and header entries are counted (every
//! value, each item of a list included) and sized as they are read, so a body with more than
//! `max_header_count` values or `max_header_bytes` bytes is refused at the first value over
//! the limit, before any [`HeaderMap`] is built. A `HeaderMap` panics past 24,576 fields; no
//! input reaches that.
//!
//! serde reports a wrong JSON type without saying where; the pass therefore keeps, in
//! [`Ctx::expect`], what the value being read should be, and a type error is attributed to
//! that field.

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::edge::limits::HeaderLimits;
use crate::surfaces::api::state::drop_forwarding;

/// A described request, checked.
#[derive(Debug)]
pub struct Described {
    pub ip: IpAddr,
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
}

/// What is wrong with a `/v1/decide` body.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DescribeError {
    #[error("body is not JSON: {0}")]
    NotJson(String),
    #[error("body must be a JSON object")]
    NotObject,
    #[error("field `{0}` is missing")]
    Missing(&'static str),
    #[error("field `{field}`: {message}")]
    Invalid { field: String, message: String },
    #[error(
        "field `headers`: more than {max} header values (each item of a list counts); \
         send at most {max}"
    )]
    TooManyHeaders { max: usize },
    #[error(
        "field `headers`: more than {max} bytes of header names and values; send at most {max}"
    )]
    HeadersTooLarge { max: usize },
}

impl DescribeError {
    /// The field at fault, when there is one.
    pub fn field(&self) -> Option<String> {
        match self {
            DescribeError::Missing(f) => Some((*f).to_string()),
            DescribeError::Invalid { field, .. } => Some(field.clone()),
            DescribeError::TooManyHeaders { .. } | DescribeError::HeadersTooLarge { .. } => {
                Some("headers".to_string())
            }
            DescribeError::NotJson(_) | DescribeError::NotObject => None,
        }
    }

    /// Over a header limit: answered 431, like the same request head sent to the proxy.
    pub fn is_header_limit(&self) -> bool {
        matches!(
            self,
            DescribeError::TooManyHeaders { .. } | DescribeError::HeadersTooLarge { .. }
        )
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> DescribeError {
    DescribeError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// Parses and checks a `/v1/decide` body; `limits` bound the described headers.
pub fn parse(body: &[u8], limits: HeaderLimits) -> Result<Described, DescribeError> {
    // JSON text is UTF-8 (RFC 8259 §8.1); serde_json checks only the strings it decodes, not
    // those it skips (unknown fields), so a body that is not JSON would otherwise pass.
    if let Err(e) = std::str::from_utf8(body) {
        return Err(DescribeError::NotJson(format!("not UTF-8 ({e})")));
    }
    let mut ctx = Ctx {
        expect: Expect::Object,
        fault: None,
        limits,
        bytes: 0,
        fields: Fields::default(),
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let read = BodySeed(&mut ctx)
        .deserialize(&mut de)
        .and_then(|()| de.end());
    if let Err(err) = read {
        return Err(match ctx.fault.take() {
            Some(fault) => fault,
            None if err.is_data() => {
                std::mem::replace(&mut ctx.expect, Expect::Object).type_error()
            }
            None => DescribeError::NotJson(err.to_string()),
        });
    }
    ctx.fields.check()
}

/// What the value being read must be; names the field when it is not. Header names are
/// borrowed from the body (only a name written with escapes is copied).
enum Expect<'de> {
    Object,
    Text(&'static str),
    Headers,
    HeaderValue(Cow<'de, str>),
    ListItem(Cow<'de, str>),
}

impl Expect<'_> {
    fn type_error(self) -> DescribeError {
        match self {
            Expect::Object => DescribeError::NotObject,
            Expect::Text(field) => invalid(field, "must be a string"),
            Expect::Headers => invalid("headers", "must be an object of header names to values"),
            Expect::HeaderValue(name) => invalid(
                format!("headers.{name}"),
                "must be a string or a list of strings",
            ),
            Expect::ListItem(name) => {
                invalid(format!("headers.{name}"), "list items must be strings")
            }
        }
    }
}

/// The body's fields as read, strings borrowed from the body where JSON allows.
#[derive(Default)]
struct Fields<'de> {
    ip: Option<Cow<'de, str>>,
    method: Option<Cow<'de, str>>,
    path: Option<Cow<'de, str>>,
    headers: Vec<(Cow<'de, str>, Cow<'de, str>)>,
}

impl Fields<'_> {
    fn check(self) -> Result<Described, DescribeError> {
        let ip_text = self.ip.ok_or(DescribeError::Missing("ip"))?;
        let ip: IpAddr = ip_text
            .parse()
            .map(crate::model::address::canonical_ip)
            .map_err(|_| invalid("ip", format!("{ip_text:?} is not an IPv4 or IPv6 address")))?;
        let method = match self.method {
            None => Method::GET,
            Some(m) => Method::from_bytes(m.as_bytes())
                .map_err(|_| invalid("method", format!("{m:?} is not an HTTP method")))?,
        };
        let path_text = self.path.ok_or(DescribeError::Missing("path"))?;
        if !path_text.starts_with('/') {
            return Err(invalid(
                "path",
                format!("{path_text:?} must start with `/`"),
            ));
        }
        if let Some(refusal) = crate::model::request_path::refusal(&path_text) {
            return Err(invalid("path", refusal.detail()));
        }
        let path = path_text.split('?').next().unwrap_or("/").to_string();

        let too_many = || DescribeError::TooManyHeaders {
            max: self.headers.len(),
        };
        // The count is bounded by `max_header_count` (at most 8192, checked by the config),
        // far below what a HeaderMap holds; the fallible calls keep it so whatever changes.
        let mut headers =
            HeaderMap::try_with_capacity(self.headers.len()).map_err(|_| too_many())?;
        for (name, value) in &self.headers {
            let field = || format!("headers.{name}");
            let hn = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| invalid(field(), "is not a valid header name"))?;
            let hv = HeaderValue::from_str(value)
                .map_err(|_| invalid(field(), "value has characters not allowed in a header"))?;
            headers.try_append(hn, hv).map_err(|_| too_many())?;
        }
        drop_forwarding(&mut headers);
        Ok(Described {
            ip,
            method,
            path,
            headers,
        })
    }
}

/// State of one parse: what is expected, the first fault, and the fields read so far.
struct Ctx<'de> {
    expect: Expect<'de>,
    /// A fault found while reading (over a limit); reported instead of the error serde makes
    /// of it.
    fault: Option<DescribeError>,
    limits: HeaderLimits,
    /// Bytes of header fields so far, counted as on the wire (name + value + `": "` + CRLF).
    bytes: usize,
    fields: Fields<'de>,
}

impl<'de> Ctx<'de> {
    fn push_header<E: de::Error>(
        &mut self,
        name: Cow<'de, str>,
        value: Cow<'de, str>,
    ) -> Result<(), E> {
        let max_count = self.limits.max_count;
        let max_bytes = self.limits.max_bytes;
        self.bytes = self.bytes.saturating_add(name.len() + value.len() + 4);
        if self.fields.headers.len() >= max_count {
            return Err(self.fail(DescribeError::TooManyHeaders { max: max_count }));
        }
        if self.bytes > max_bytes {
            return Err(self.fail(DescribeError::HeadersTooLarge { max: max_bytes }));
        }
        self.fields.headers.push((name, value));
        Ok(())
    }

    fn fail<E: de::Error>(&mut self, fault: DescribeError) -> E {
        let message = fault.to_string();
        self.fault = Some(fault);
        E::custom(message)
    }
}

/// A JSON string, borrowed from the body unless it had escapes.
struct Text<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

/// The whole body: an object; unknown members are skipped without being kept.
struct BodySeed<'c, 'de>(&'c mut Ctx<'de>);

impl<'de> DeserializeSeed<'de> for BodySeed<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for BodySeed<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        fn text<'de, A: MapAccess<'de>>(
            map: &mut A,
            ctx: &mut Ctx<'de>,
            field: &'static str,
        ) -> Result<Option<Cow<'de, str>>, A::Error> {
            ctx.expect = Expect::Text(field);
            Ok(map.next_value::<Option<Text<'de>>>()?.map(|t| t.0))
        }
        let ctx = self.0;
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            match key.as_ref() {
                "ip" => ctx.fields.ip = text(&mut map, ctx, "ip")?,
                "method" => ctx.fields.method = text(&mut map, ctx, "method")?,
                "path" => ctx.fields.path = text(&mut map, ctx, "path")?,
                "headers" => {
                    ctx.expect = Expect::Headers;
                    map.next_value_seed(HeadersSeed(ctx))?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            ctx.expect = Expect::Object;
        }
        Ok(())
    }
}

/// `headers`: null, or an object of names to a string or a list of strings.
struct HeadersSeed<'c, 'de>(&'c mut Ctx<'de>);

impl<'de> DeserializeSeed<'de> for HeadersSeed<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for HeadersSeed<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of header names to values")
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let ctx = self.0;
        while let Some(Text(name)) = map.next_key::<Text<'de>>()? {
            ctx.expect = Expect::HeaderValue(name.clone());
            map.next_value_seed(ValueSeed { ctx, name })?;
            ctx.expect = Expect::Headers;
        }
        Ok(())
    }
}

/// One header's value: a string, or a list of strings (one field each).
struct ValueSeed<'c, 'de> {
    ctx: &'c mut Ctx<'de>,
    name: Cow<'de, str>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string or a list of strings")
    }
    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<(), E> {
        self.ctx.push_header(self.name, Cow::Borrowed(s))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        self.ctx.push_header(self.name, Cow::Owned(s.to_owned()))
    }
    fn visit_string<E: de::Error>(self, s: String) -> Result<(), E> {
        self.ctx.push_header(self.name, Cow::Owned(s))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.ctx.expect = Expect::ListItem(self.name.clone());
        while let Some(Text(v)) = seq.next_element::<Text<'de>>()? {
            self.ctx.push_header(self.name.clone(), v)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// Found by the `decide_body` fuzz target: invalid UTF-8 in a field the parser skips.
    #[test]
    fn a_body_that_is_not_utf8_is_not_json() {
        let body = b"{\"ip\":\"2001:db8::1\",\"path\":\"/a\",\"x\":\"\xe4ders\"}";
        let limits = HeaderLimits {
            max_count: 64,
            max_bytes: 16 * 1024,
        };
        assert!(matches!(
            super::parse(body, limits),
            Err(DescribeError::NotJson(_))
        ));
        assert!(serde_json::from_slice::<serde_json::Value>(body).is_err());
    }

    use super::*;

    const LIMITS: HeaderLimits = HeaderLimits {
        max_count: 64,
        max_bytes: 16 * 1024,
    };

    fn parse(body: &str) -> Result<Described, DescribeError> {
        super::parse(body.as_bytes(), LIMITS)
    }

    fn field_of(body: &str) -> Option<String> {
        parse(body).unwrap_err().field()
    }

    #[test]
    fn happy_path_parses_every_field() {
        let d = parse(r#"{"ip":"2001:db8::1","method":"POST","path":"/api/x?q=1","headers":{"cookie":"s=1","accept":["a","b"]},"other":{"deep":[1,{"x":null}]}}"#).unwrap();
        assert_eq!(d.ip, "2001:db8::1".parse::<IpAddr>().unwrap());
        assert_eq!(d.method, Method::POST);
        assert_eq!(d.path, "/api/x");
        assert_eq!(d.headers.get_all("accept").iter().count(), 2);
        assert_eq!(d.headers["cookie"], "s=1");
        // Escapes are decoded (such strings are copied, not borrowed).
        let d = parse(r#"{"ip":"1.2.3.4","path":"\/a","headers":{"x-\u0061":"\u0062"}}"#).unwrap();
        assert_eq!(d.path, "/a");
        assert_eq!(d.headers["x-a"], "b");
        let d = parse(r#"{"ip":"1.2.3.4","path":"/","method":null,"headers":null}"#).unwrap();
        assert_eq!(d.method, Method::GET);
        assert!(d.headers.is_empty());
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(field_of(r#"{"path":"/"}"#).as_deref(), Some("ip"));
        assert_eq!(
            field_of(r#"{"ip":"nope","path":"/"}"#).as_deref(),
            Some("ip")
        );
        assert_eq!(field_of(r#"{"ip":5,"path":"/"}"#).as_deref(), Some("ip"));
        assert_eq!(field_of(r#"{"ip":"1.2.3.4"}"#).as_deref(), Some("path"));
        assert_eq!(
            field_of(r#"{"ip":"1.2.3.4","path":"x"}"#).as_deref(),
            Some("path")
        );
        assert_eq!(
            field_of(r#"{"ip":"1.2.3.4","path":["/"]}"#).as_deref(),
            Some("path")
        );
        assert_eq!(
            field_of(r#"{"ip":"1.2.3.4","path":"/","method":"G E T"}"#).as_deref(),
            Some("method")
        );
        assert_eq!(
            field_of(r#"{"ip":"1.2.3.4","path":"/","headers":[]}"#).as_deref(),
            Some("headers")
        );
        assert_eq!(
            field_of(r#"{"ip":"1.2.3.4","path":"/","headers":{"bad name":"v"}}"#).as_deref(),
            Some("headers.bad name")
        );
        assert_eq!(
            field_of(r#"{"ip":"1.2.3.4","path":"/","headers":{"x":"a\nb"}}"#).as_deref(),
            Some("headers.x")
        );
        let e = parse(r#"{"ip":"1.2.3.4","path":"/","headers":{"x":7}}"#).unwrap_err();
        assert_eq!(e.field().as_deref(), Some("headers.x"));
        assert!(e.to_string().contains("a string or a list"), "{e}");
        let e = parse(r#"{"ip":"1.2.3.4","path":"/","headers":{"x":["a",{}]}}"#).unwrap_err();
        assert_eq!(e.field().as_deref(), Some("headers.x"));
        assert!(e.to_string().contains("list items"), "{e}");
        assert_eq!(parse("{nope").unwrap_err().field(), None);
        assert!(matches!(parse("{nope"), Err(DescribeError::NotJson(_))));
        assert!(matches!(
            parse(r#"{"ip":"1.2.3.4"} x"#),
            Err(DescribeError::NotJson(_))
        ));
        assert_eq!(parse("[1]").unwrap_err(), DescribeError::NotObject);
        assert_eq!(parse("\"x\"").unwrap_err(), DescribeError::NotObject);
    }

    #[test]
    fn forwarding_headers_cannot_change_the_client() {
        let d = parse(r#"{"ip":"192.0.2.1","path":"/","headers":{"x-forwarded-for":"10.9.9.9","x-real-ip":"10.9.9.9","forwarded":"for=10.9.9.9"}}"#).unwrap();
        assert!(d.headers.is_empty());
    }

    fn with_headers(entries: &str) -> String {
        format!(r#"{{"ip":"192.0.2.1","path":"/","headers":{{{entries}}}}}"#)
    }

    #[test]
    fn every_value_counts_toward_max_header_count() {
        let names = |n: usize| {
            (0..n)
                .map(|i| format!(r#""h{i}":"v""#))
                .collect::<Vec<_>>()
                .join(",")
        };
        assert_eq!(parse(&with_headers(&names(64))).unwrap().headers.len(), 64);
        let e = parse(&with_headers(&names(65))).unwrap_err();
        assert_eq!(e, DescribeError::TooManyHeaders { max: 64 });
        assert!(e.is_header_limit());
        assert_eq!(e.field().as_deref(), Some("headers"));
        // Items of a list count one each, and so do repeated names.
        let list = format!(r#""x":[{}]"#, vec![r#""v""#; 65].join(","));
        assert_eq!(
            parse(&with_headers(&list)).unwrap_err(),
            DescribeError::TooManyHeaders { max: 64 }
        );
        let repeated = vec![r#""x":"v""#; 65].join(",");
        assert_eq!(
            parse(&with_headers(&repeated)).unwrap_err(),
            DescribeError::TooManyHeaders { max: 64 }
        );
        // The 25,000 entries that once overflowed a HeaderMap (and panicked) are refused too.
        let e = parse(&with_headers(&names(25_000))).unwrap_err();
        assert_eq!(e, DescribeError::TooManyHeaders { max: 64 });
    }

    #[test]
    fn header_bytes_are_bounded_like_on_the_wire() {
        // Each field costs name + value + 4 as on the wire: two 8 KiB values pass 16 KiB.
        let v = "v".repeat(8 * 1024);
        let one = format!(r#""a":"{v}""#);
        assert!(parse(&with_headers(&one)).is_ok());
        let two = format!(r#""a":"{v}","b":"{v}""#);
        assert_eq!(
            parse(&with_headers(&two)).unwrap_err(),
            DescribeError::HeadersTooLarge { max: 16 * 1024 }
        );
    }
}
