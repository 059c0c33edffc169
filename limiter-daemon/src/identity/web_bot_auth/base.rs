//! The signature base (RFC 9421 §2.5): one line per covered component, `"name": value`, then
//! `"@signature-params": <the signature's parameters>`. Derived components are rebuilt from
//! the request's parts; fields from its headers (several lines joined with `, `, trimmed).
//! A component we cannot rebuild makes no base: the signature then cannot verify.

use http::HeaderMap;

use super::fields::{dictionary_member, Component, Presented};
pub use crate::model::agent::normalize_authority;

/// The parts of a request derived components come from. Surfaces that see less (a decision
/// API told only the headers) leave the rest `None`; signatures covering them do not verify.
#[derive(Clone, Copy, Debug)]
pub struct RequestParts<'a> {
    pub method: Option<&'a str>,
    /// `https` or `http`; `None` when unknown.
    pub scheme: Option<&'a str>,
    /// The target host (and port), from `:authority` or `Host`.
    pub authority: Option<&'a str>,
    /// Path and query as requested (`/a/b?c=d`).
    pub path_and_query: Option<&'a str>,
    /// The path alone, for a surface that knows the path but not the query (the engine):
    /// `@path` is rebuilt from it, while `@query`, `@request-target` and `@target-uri` are
    /// unseen. Ignored when `path_and_query` is given.
    pub path: Option<&'a str>,
    pub headers: &'a HeaderMap,
}

fn header_value(headers: &HeaderMap, name: &str) -> Option<String> {
    let mut out: Option<String> = None;
    for v in headers.get_all(name) {
        let text = std::str::from_utf8(v.as_bytes()).ok()?.trim();
        match &mut out {
            None => out = Some(text.to_owned()),
            Some(s) => {
                s.push_str(", ");
                s.push_str(text);
            }
        }
    }
    out
}

fn component_value(c: &Component, parts: &RequestParts<'_>) -> Option<String> {
    let (path, query) = match parts.path_and_query {
        Some(pq) => match pq.split_once('?') {
            Some((p, q)) => (Some(p), Some(q)),
            None => (Some(pq), Some("")),
        },
        None => (parts.path, None),
    };
    if c.key.is_some() && c.name.starts_with('@') {
        return None;
    }
    Some(match c.name.as_str() {
        "@method" => parts.method?.to_owned(),
        "@authority" => normalize_authority(parts.authority?, parts.scheme),
        "@scheme" => parts.scheme?.to_ascii_lowercase(),
        "@path" => {
            let p = path?;
            if p.is_empty() { "/" } else { p }.to_owned()
        }
        "@query" => format!("?{}", query?),
        "@request-target" => parts.path_and_query?.to_owned(),
        "@target-uri" => format!(
            "{}://{}{}",
            parts.scheme?.to_ascii_lowercase(),
            normalize_authority(parts.authority?, parts.scheme),
            parts.path_and_query?
        ),
        name if name.starts_with('@') => return None,
        name => {
            let value = header_value(parts.headers, name)?;
            match &c.key {
                Some(key) => dictionary_member(value.as_bytes(), key)?,
                None => value,
            }
        }
    })
}

/// Whether `p` covers a part of the request that `parts` does not carry: a derived component
/// whose part the surface left `None`, or a field absent from the headers (a surface may pass
/// only the fields a decision reads). Such a signature can be neither verified nor refused.
pub fn unseen_component(p: &Presented, parts: &RequestParts<'_>) -> bool {
    p.components.iter().any(|c| match c.name.as_str() {
        "@method" => parts.method.is_none(),
        "@authority" => parts.authority.is_none(),
        "@scheme" => parts.scheme.is_none(),
        "@path" => parts.path_and_query.is_none() && parts.path.is_none(),
        "@query" | "@request-target" => parts.path_and_query.is_none(),
        "@target-uri" => {
            parts.scheme.is_none() || parts.authority.is_none() || parts.path_and_query.is_none()
        }
        name if name.starts_with('@') => false,
        name => !parts.headers.contains_key(name),
    })
}

/// The base `p` was signed over, or `None` when a covered component is missing or one we do
/// not rebuild (or is covered twice, which §2.5 forbids).
pub fn signature_base(p: &Presented, parts: &RequestParts<'_>) -> Option<String> {
    let mut out = String::with_capacity(256);
    for (i, c) in p.components.iter().enumerate() {
        if p.components[..i]
            .iter()
            .any(|o| o.serialized == c.serialized)
        {
            return None;
        }
        let value = component_value(c, parts)?;
        if value.contains('\n') {
            return None;
        }
        out.push_str(&c.serialized);
        out.push_str(": ");
        out.push_str(&value);
        out.push('\n');
    }
    out.push_str("\"@signature-params\": ");
    out.push_str(&p.params_text);
    Some(out)
}
