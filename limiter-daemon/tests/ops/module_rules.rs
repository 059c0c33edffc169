//! The layout rule `modgraph` cannot see: a parent `mod.rs` declares and re-exports its
//! children, and holds nothing they import. A child that imports an item defined in its
//! parent makes the two files import each other (the parent names the child; the child uses
//! the parent), so a shared item moves down into a file of its own.
//!
//! Read as text, like `modgraph`: every `mod.rs` under `src/`, the names it defines (outside
//! its test module), and each sibling file's `use super::…`, `super::Name` and
//! `crate::<the module>::Name` paths.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Source text without its `#[cfg(test)] mod tests { … }` (always last in this codebase).
fn without_tests(src: &str) -> &str {
    match src.find("#[cfg(test)]\nmod tests") {
        Some(i) => &src[..i],
        None => src,
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Names of the items a file defines at its top level (structs, enums, traits, functions,
/// constants, statics and type aliases); `mod` declarations and re-exports are not items.
fn defined(src: &str) -> BTreeSet<String> {
    const KINDS: [&str; 7] = ["struct", "enum", "trait", "fn", "const", "static", "type"];
    let mut names = BTreeSet::new();
    for line in src.lines() {
        if line.starts_with(char::is_whitespace) {
            continue; // only top-level items
        }
        let mut words = line
            .split(|c: char| c.is_whitespace() || c == '(' || c == '<' || c == ':' || c == ';')
            .filter(|w| !w.is_empty())
            .skip_while(|w| {
                [
                    "pub", "crate)", "super)", "async", "unsafe", "extern", "\"C\"",
                ]
                .contains(w)
            });
        if let (Some(kind), Some(name)) = (words.next(), words.next()) {
            if KINDS.contains(&kind) && name.chars().all(is_ident) {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// Names a child file takes from `module` (its parent): `use super::{A, b::C}` gives `A` and
/// `b`; `super::A` and `crate::<module>::A` anywhere give `A`.
fn taken_from_parent(src: &str, module: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut prefixes = vec!["super::".to_string()];
    if !module.is_empty() {
        prefixes.push(format!("crate::{module}::"));
    }
    for prefix in &prefixes {
        for (at, _) in src.match_indices(prefix.as_str()) {
            let rest = &src[at + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                for part in group.split(',') {
                    let head: String = part.trim().chars().take_while(|c| is_ident(*c)).collect();
                    if !head.is_empty() {
                        names.insert(head);
                    }
                }
            } else {
                let head: String = rest.chars().take_while(|c| is_ident(*c)).collect();
                if !head.is_empty() {
                    names.insert(head);
                }
            }
        }
    }
    names
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    out.sort();
    out
}

/// Every `(child file, names)` that breaks the rule under `dir`, recursively.
fn violations(src_root: &Path, dir: &Path, found: &mut Vec<String>) {
    let parent = dir.join("mod.rs");
    if parent.is_file() {
        let text = std::fs::read_to_string(&parent).expect("read mod.rs");
        let items = defined(without_tests(&text));
        let module = dir
            .strip_prefix(src_root)
            .expect("under src")
            .to_string_lossy()
            .replace('/', "::");
        for f in rust_files(dir) {
            if f.extension().is_some_and(|e| e == "rs") && f != parent {
                let text = std::fs::read_to_string(&f).expect("read child");
                let hit: Vec<String> = taken_from_parent(without_tests(&text), &module)
                    .intersection(&items)
                    .cloned()
                    .collect();
                if !hit.is_empty() {
                    let rel = f.strip_prefix(src_root).expect("under src").display();
                    found.push(format!("{rel} imports {hit:?} from its parent mod.rs"));
                }
            }
        }
    }
    for d in rust_files(dir) {
        if d.is_dir() {
            violations(src_root, &d, found);
        }
    }
}

#[test]
fn no_child_module_imports_an_item_defined_in_its_parent() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    violations(&src, &src, &mut found);
    assert!(
        found.is_empty(),
        "move these items down into files of their own:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_reading_finds_what_it_must() {
    let parent =
        "pub struct Engine {\n    x: u8,\n}\npub(crate) fn helper() {}\npub async fn run() {}\n\
                  pub use base::Moved;\npub mod child;\nconst LIMIT: u32 = 1;\n\
                  #[cfg(test)]\nmod tests {\n    fn only_in_tests() {}\n}\n";
    let items = defined(without_tests(parent));
    assert_eq!(
        items,
        ["Engine", "LIMIT", "helper", "run"]
            .map(String::from)
            .into()
    );
    let child =
        "use super::{Engine, base::Moved};\nfn f() { super::helper(); crate::engine::LIMIT; }\n";
    let taken = taken_from_parent(child, "engine");
    let hit: Vec<&String> = taken.intersection(&items).collect();
    assert_eq!(
        hit,
        ["Engine", "LIMIT", "helper"]
            .map(String::from)
            .iter()
            .collect::<Vec<_>>()
    );
    assert!(taken_from_parent("use super::base::Engine;", "engine")
        .intersection(&items)
        .next()
        .is_none());
}
