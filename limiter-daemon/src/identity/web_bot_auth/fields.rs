//! Reading the three fields a signed agent sends (RFC 9421 §4, the webbotauth draft §4):
//! `Signature-Input` and `Signature` (dictionaries keyed by label) and `Signature-Agent`
//! (a dictionary keyed by label, or the older bare string). Parsing is done by the `sfv`
//! crate; this file only picks the web-bot-auth signature out of what it parsed, within
//! bounds (hostile input costs a bounded parse, never more).

use http::HeaderMap;
use sfv::{BareItem, Dictionary, FieldType, InnerList, ListEntry, Parser};

/// The longest of each field we parse; longer ones are refused unparsed.
pub const MAX_FIELD_LEN: usize = 4096;
/// The most signatures (labels) one request may carry that we look at.
pub const MAX_LABELS: usize = 4;
/// The most covered components one signature may list.
pub const MAX_COMPONENTS: usize = 16;

/// One covered component: its name (lower case) and the `key` parameter, if any (a member of
/// a dictionary field, as `"signature-agent";key="sig1"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Component {
    pub name: String,
    pub key: Option<String>,
    /// The identifier as the signature base writes it (`"name"` plus its parameters).
    pub serialized: String,
}

/// The web-bot-auth signature a request carries, as read (nothing checked yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Presented {
    pub label: String,
    pub components: Vec<Component>,
    /// `@signature-params`' value: the inner list as the signer serialized it (re-serialized
    /// canonically, which is what RFC 9421 §2.3 asks signers to produce).
    pub params_text: String,
    pub created: Option<i64>,
    pub expires: Option<i64>,
    pub keyid: Option<String>,
    pub alg: Option<String>,
    pub tag: Option<String>,
    /// The signer's `nonce`: a signature carrying one verifies once ([`super::nonces`]).
    pub nonce: Option<String>,
    pub signature: Vec<u8>,
}

/// Why a request's fields could not be read as a web-bot-auth signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldError {
    /// No `Signature-Input` field: the request is not signed.
    Absent,
    /// A field is oversized, malformed, or names no signature tagged `web-bot-auth`.
    Malformed,
}

fn field<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a [u8]>, FieldError> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    // Several lines of one dictionary field would have to be joined; signers send one.
    if values.next().is_some() || first.len() > MAX_FIELD_LEN {
        return Err(FieldError::Malformed);
    }
    Ok(Some(first.as_bytes()))
}

fn dictionary(bytes: &[u8]) -> Result<Dictionary, FieldError> {
    let dict: Dictionary = Parser::new(bytes)
        .parse()
        .map_err(|_| FieldError::Malformed)?;
    if dict.len() > MAX_LABELS * 2 {
        return Err(FieldError::Malformed);
    }
    Ok(dict)
}

/// The signature tagged `web-bot-auth` (the first such label), or why there is none.
pub fn presented(headers: &HeaderMap) -> Result<Presented, FieldError> {
    let input = field(headers, "signature-input")?.ok_or(FieldError::Absent)?;
    let input = dictionary(input)?;
    let signatures = dictionary(field(headers, "signature")?.ok_or(FieldError::Malformed)?)?;
    for (label, entry) in input.iter().take(MAX_LABELS) {
        let ListEntry::InnerList(list) = entry else {
            continue;
        };
        let tag = string_param(list, "tag");
        if tag.as_deref() != Some(super::TAG) {
            continue;
        }
        let Some(ListEntry::Item(sig)) = signatures.get(label) else {
            return Err(FieldError::Malformed);
        };
        let BareItem::ByteSequence(signature) = &sig.bare_item else {
            return Err(FieldError::Malformed);
        };
        return read(label.as_str(), list, signature.clone(), tag);
    }
    Err(FieldError::Malformed)
}

fn string_param(list: &InnerList, name: &str) -> Option<String> {
    list.params
        .iter()
        .find(|(k, _)| k.as_str() == name)
        .and_then(|(_, v)| v.as_string().map(|s| s.as_str().to_owned()))
}

fn int_param(list: &InnerList, name: &str) -> Option<i64> {
    list.params
        .iter()
        .find(|(k, _)| k.as_str() == name)
        .and_then(|(_, v)| v.as_integer().map(i64::from))
}

fn read(
    label: &str,
    list: &InnerList,
    signature: Vec<u8>,
    tag: Option<String>,
) -> Result<Presented, FieldError> {
    if list.items.len() > MAX_COMPONENTS {
        return Err(FieldError::Malformed);
    }
    let mut components = Vec::with_capacity(list.items.len());
    for item in &list.items {
        let BareItem::String(name) = &item.bare_item else {
            return Err(FieldError::Malformed);
        };
        let name = name.as_str();
        if name.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(FieldError::Malformed);
        }
        let mut key = None;
        for (k, v) in &item.params {
            match (k.as_str(), v) {
                ("key", BareItem::String(s)) => key = Some(s.as_str().to_owned()),
                // `sf`, `bs`, `req`, `tr`, `name`: forms this verifier does not rebuild.
                _ => return Err(FieldError::Malformed),
            }
        }
        let serialized = item.serialize();
        components.push(Component {
            name: name.to_owned(),
            key,
            serialized,
        });
    }
    let params_text = vec![ListEntry::InnerList(list.clone())]
        .serialize()
        .ok_or(FieldError::Malformed)?;
    Ok(Presented {
        label: label.to_owned(),
        components,
        params_text,
        created: int_param(list, "created"),
        expires: int_param(list, "expires"),
        keyid: string_param(list, "keyid"),
        alg: string_param(list, "alg"),
        tag,
        nonce: string_param(list, "nonce"),
        signature,
    })
}

/// The agent a `Signature-Agent` field names for `label`: the dictionary member keyed by the
/// label (or the only member), or the older bare string. `None`: no field; `Err`: unreadable.
pub fn signature_agent(headers: &HeaderMap, label: &str) -> Result<Option<String>, FieldError> {
    let Some(bytes) = field(headers, "signature-agent")? else {
        return Ok(None);
    };
    if let Ok(dict) = Parser::new(bytes).parse::<Dictionary>() {
        let member = dict
            .get(label)
            .or_else(|| (dict.len() == 1).then(|| dict.values().next()).flatten());
        if let Some(ListEntry::Item(item)) = member {
            if let Some(s) = item.bare_item.as_string() {
                return Ok(Some(s.as_str().to_owned()));
            }
        }
    }
    // The draft's earlier form: one sf-string naming the agent.
    let item: sfv::Item = Parser::new(bytes)
        .parse()
        .map_err(|_| FieldError::Malformed)?;
    item.bare_item
        .as_string()
        .map(|s| Some(s.as_str().to_owned()))
        .ok_or(FieldError::Malformed)
}

/// The value a dictionary field's member `key` contributes to a signature base (RFC 9421
/// §2.1.2): the member re-serialized.
pub fn dictionary_member(value: &[u8], key: &str) -> Option<String> {
    let dict: Dictionary = Parser::new(value).parse().ok()?;
    let member = dict.get(key)?.clone();
    let mut one = Dictionary::new();
    one.insert(sfv::Key::from_string("x".into()).ok()?, member);
    // Serialized as `x=<member>`, or `x` (plus parameters) for a bare `true`: strip the
    // made-up name (`true` is written `?1` as a member value).
    let text = one.serialize()?;
    match text.strip_prefix("x=") {
        Some(rest) => Some(rest.to_owned()),
        None => text.strip_prefix('x').map(|rest| format!("?1{rest}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionary_members_as_a_signature_base_writes_them() {
        assert_eq!(
            dictionary_member(b"sig1=\"https://a.example\", b=2", "sig1").as_deref(),
            Some("\"https://a.example\"")
        );
        // A bare `true` member (hostile input) must not panic.
        assert_eq!(dictionary_member(b"sig1", "sig1").as_deref(), Some("?1"));
        assert_eq!(
            dictionary_member(b"sig1;a=1", "sig1").as_deref(),
            Some("?1;a=1")
        );
        assert_eq!(dictionary_member(b"sig1=1", "sig2"), None);
    }
}
