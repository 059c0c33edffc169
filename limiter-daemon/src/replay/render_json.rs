//! `--json`: the report (or the comparison) as one pretty-printed JSON document, the same
//! value the text rendering reads, for scripts.

use super::compare::Comparison;
use super::report::Report;

pub fn report(r: &Report) -> String {
    // A report holds only strings, numbers and maps with string keys: it always serialises.
    serde_json::to_string_pretty(r).unwrap_or_default()
}

pub fn comparison(c: &Comparison) -> String {
    serde_json::to_string_pretty(c).unwrap_or_default()
}
