//! The fast path of JSON lines: a flat object whose strings hold no escapes (what nginx's
//! `escape=json` writes for ordinary requests), scanned in place. serde_json's derive spent
//! more per line than the whole engine; this scan hands each member to the caller as borrowed
//! text. Anything else (an escape, a nested value, a syntax slip) answers `false`, and the
//! line is parsed again by serde_json, which gives the exact answer or the error.

/// A member's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Val<'a> {
    Str(&'a str),
    /// A number, as written.
    Num(&'a str),
    Null,
    /// `true` or `false`.
    Bool,
}

fn ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\r' | b'\n')) {
        i += 1;
    }
    i
}

/// The string at `b[i] == b'"'` and the index after it; `None` for an escape or a control
/// byte (the slow path decides those).
fn string(line: &str, i: usize) -> Option<(&str, usize)> {
    let b = line.as_bytes();
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let start = i + 1;
    let len = b
        .get(start..)?
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
    let end = start + len;
    (b[end] == b'"').then(|| (&line[start..end], end + 1))
}

fn number(line: &str, i: usize) -> Option<(&str, usize)> {
    let b = line.as_bytes();
    let len = b
        .get(i..)?
        .iter()
        .position(|c| !matches!(c, b'0'..=b'9' | b'-' | b'.'))
        .unwrap_or(b.len() - i);
    let text = &line[i..i + len];
    // Exponents and other rarities: the slow path.
    let plain = !text.is_empty() && text.bytes().skip(1).all(|c| c != b'-');
    plain.then_some((text, i + len))
}

/// Calls `member` for each member of the flat object `line`, in order; `member` answering
/// `false` stops the scan. `true` when the whole line was scanned.
pub fn scan<'a>(line: &'a str, mut member: impl FnMut(&'a str, Val<'a>) -> bool) -> bool {
    let b = line.as_bytes();
    let mut i = ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return false;
    }
    i = ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return ws(b, i + 1) == b.len();
    }
    loop {
        let Some((key, next)) = string(line, i) else {
            return false;
        };
        i = ws(b, next);
        if b.get(i) != Some(&b':') {
            return false;
        }
        i = ws(b, i + 1);
        let parsed = match b.get(i) {
            Some(b'"') => string(line, i).map(|(s, n)| (Val::Str(s), n)),
            Some(b'0'..=b'9' | b'-') => number(line, i).map(|(s, n)| (Val::Num(s), n)),
            Some(b'n') if b[i..].starts_with(b"null") => Some((Val::Null, i + 4)),
            Some(b't') if b[i..].starts_with(b"true") => Some((Val::Bool, i + 4)),
            Some(b'f') if b[i..].starts_with(b"false") => Some((Val::Bool, i + 5)),
            _ => None,
        };
        let Some((value, next)) = parsed else {
            return false;
        };
        if !member(key, value) {
            return false;
        }
        i = ws(b, next);
        match b.get(i) {
            Some(b',') => i = ws(b, i + 1),
            Some(b'}') => return ws(b, i + 1) == b.len(),
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(line: &str) -> Option<Vec<(&str, Val<'_>)>> {
        let mut out = Vec::new();
        scan(line, |k, v| {
            out.push((k, v));
            true
        })
        .then_some(out)
    }

    #[test]
    fn flat_objects_scan_in_place() {
        assert_eq!(
            members(r#" {"a":"x", "n": -1.5,"z":null,"t":true,"f":false} "#),
            Some(vec![
                ("a", Val::Str("x")),
                ("n", Val::Num("-1.5")),
                ("z", Val::Null),
                ("t", Val::Bool),
                ("f", Val::Bool)
            ])
        );
        assert_eq!(members("{}"), Some(vec![]));
    }

    #[test]
    fn anything_unusual_is_left_to_serde() {
        for line in [
            "",
            "{",
            "[1]",
            r#"{"a":"x\"y"}"#,
            r#"{"a":{"b":1}}"#,
            r#"{"a":[1]}"#,
            r#"{"a":1e9}"#,
            r#"{"a":1-2}"#,
            r#"{"a":"x",}"#,
            r#"{"a":"x"} trailing"#,
            r#"{"a" "x"}"#,
            "{\"a\":\"tab\there\"}",
            r#"{"a":nul}"#,
        ] {
            assert_eq!(members(line), None, "{line:?}");
        }
    }
}
