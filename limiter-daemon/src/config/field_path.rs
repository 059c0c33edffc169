//! The field a serde error is about, as a dotted path (`tiers.anon.burst`, `routes[1].cost`):
//! where `serde_path_to_error` stopped, with the name serde puts in its own message for the
//! two errors that may be reported one level up, at the object (`unknown field `x``, `missing
//! field `x``). The config loader and the admin API's bodies both name fields this way.

/// The field at fault, given the path `serde_path_to_error` reports (`.` for the top) and the
/// inner error's message; `None` for an error about the whole document.
pub fn field_of(path: &str, message: &str) -> Option<String> {
    let at = if path == "." { "" } else { path };
    let named = ["unknown field `", "missing field `"]
        .iter()
        .find_map(|p| message.strip_prefix(p))
        .and_then(|rest| rest.split('`').next())
        .filter(|name| !name.is_empty());
    match (named, at) {
        (Some(name), "") => Some(name.to_string()),
        // Some deserializers (toml) record the unknown key in the path before refusing it.
        (Some(name), at) if at == name || at.ends_with(&format!(".{name}")) => Some(at.to_string()),
        (Some(name), at) => Some(format!("{at}.{name}")),
        (None, "") => None,
        (None, at) => Some(at.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::field_of;

    #[test]
    fn paths_and_the_names_serde_puts_in_its_message() {
        assert_eq!(
            field_of(
                "tiers.anon.burst",
                "invalid type: string \"lots\", expected u32"
            ),
            Some("tiers.anon.burst".into())
        );
        assert_eq!(
            field_of(
                "tiers.anon",
                "unknown field `bursts`, expected one of `burst`"
            ),
            Some("tiers.anon.bursts".into())
        );
        assert_eq!(
            field_of(
                "tiers.anon.bursts",
                "unknown field `bursts`, expected `burst`"
            ),
            Some("tiers.anon.bursts".into())
        );
        assert_eq!(field_of(".", "missing field `for`"), Some("for".into()));
        assert_eq!(
            field_of("routes[1]", "missing field `prefix`"),
            Some("routes[1].prefix".into())
        );
        assert_eq!(field_of(".", "expected an object"), None);
    }
}
