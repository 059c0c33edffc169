//! Finds the line of a dotted field (`tiers.anon.burst`, `routes[1].cost`) in the TOML text, so
//! validation errors can name the line as well as the field. Best effort: `None` when the field
//! is written in a form this scan does not follow (inline tables, dotted keys across tables).

/// 1-based line number of `field` in `text`.
pub fn line_of(text: &str, field: &str) -> Option<usize> {
    // Split `routes[1].cost` into table path `routes`, occurrence 1, key `cost`.
    let parts: Vec<&str> = field.split('.').collect();
    for split in (0..parts.len()).rev() {
        let (table_parts, key_parts) = parts.split_at(split);
        let key = key_parts.join(".");
        let (table, index) = table_with_index(&table_parts.join("."));
        if let Some(line) = scan(text, &table, index, &key) {
            return Some(line);
        }
    }
    None
}

fn table_with_index(table: &str) -> (String, Option<usize>) {
    if let Some(open) = table.rfind('[') {
        if let Some(idx) = table[open + 1..]
            .strip_suffix(']')
            .and_then(|n| n.parse().ok())
        {
            return (table[..open].to_string(), Some(idx));
        }
    }
    (table.to_string(), None)
}

fn scan(text: &str, table: &str, index: Option<usize>, key: &str) -> Option<usize> {
    let mut current = String::new();
    let mut occurrence: Option<usize> = None;
    let mut seen_array = 0usize;
    for (n, raw_line) in text.lines().enumerate() {
        let line = raw_line.trim();
        if let Some(h) = line.strip_prefix("[[") {
            current = h.split("]]").next().unwrap_or("").trim().to_string();
            if current == table {
                occurrence = Some(seen_array);
                seen_array += 1;
            } else {
                occurrence = None;
            }
            if key.is_empty() && current == table && occurrence == index {
                return Some(n + 1);
            }
            continue;
        }
        if let Some(h) = line.strip_prefix('[') {
            current = h.split(']').next().unwrap_or("").trim().to_string();
            occurrence = None;
            if key.is_empty() && current == table && index.is_none() {
                return Some(n + 1);
            }
            continue;
        }
        if key.is_empty() || current != table || occurrence != index {
            continue;
        }
        if let Some(rest) = line.strip_prefix(key) {
            if rest.trim_start().starts_with('=') {
                return Some(n + 1);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::line_of;

    #[test]
    fn finds_keys_in_tables_and_arrays() {
        let text = "a = 1\n[tiers.anon]\nburst = 0\n[[routes]]\nprefix = \"/a\"\n[[routes]]\nprefix = \"b\"\n";
        assert_eq!(line_of(text, "tiers.anon.burst"), Some(3));
        assert_eq!(line_of(text, "routes[1].prefix"), Some(7));
        assert_eq!(line_of(text, "routes[0].prefix"), Some(5));
        assert_eq!(line_of(text, "a"), Some(1));
        assert_eq!(line_of(text, "tiers.anon.hourly"), None);
    }
}
