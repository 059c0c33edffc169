//! `docs/configuration.md` cannot drift from the code: the config fields are derived from the
//! source (the `Raw*` serde structs under `src/config/` and limiter-common's `[admin]`, walked
//! from `RawConfig` through every field whose type is another `Raw*` struct, so
//! `[tiers.anon] burst` and `[[routes]] prefix` are found without a list kept by hand), the
//! environment variables from `src/config/env.rs` and every `LIMITER_*` name in the source
//! (limiterctl's and limiter-common's too). Each must have a row in the reference (type,
//! default, effect, none empty), and every row must name something the code has; and the
//! fields `limiter-daemon check-config` accepts are checked on the real binary, so the walk
//! itself is proven against the parser.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `struct name → [(field, type)]` for every `pub struct Raw… { … }` in `dir`.
fn raw_structs(dir: &Path) -> BTreeMap<String, Vec<(String, String)>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let src = std::fs::read_to_string(&path).unwrap();
        let mut lines = src.lines();
        while let Some(line) = lines.next() {
            let Some(name) = line
                .strip_prefix("pub struct ")
                .and_then(|r| r.strip_suffix(" {"))
                .filter(|n| n.starts_with("Raw"))
            else {
                continue;
            };
            let mut fields = Vec::new();
            for l in lines.by_ref() {
                if l == "}" {
                    break;
                }
                if let Some((field, ty)) = l
                    .trim()
                    .strip_prefix("pub ")
                    .and_then(|f| f.split_once(": "))
                {
                    fields.push((field.to_string(), ty.trim_end_matches(',').to_string()));
                }
            }
            out.insert(name.to_string(), fields);
        }
    }
    out
}

/// The `Raw…` struct a field's type holds (`Option<kernel::RawCeilings>` → `RawCeilings`).
fn nested(ty: &str) -> Option<&str> {
    ty.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .find(|w| w.starts_with("Raw"))
}

/// Every leaf field as `section.field`, walked from `RawConfig`.
fn code_fields() -> BTreeSet<String> {
    // `[admin]` lives in limiter-common, which limiterctl shares.
    let mut structs = raw_structs(&root().join("src/config"));
    structs.extend(raw_structs(&root().join("../limiter-common/src")));
    assert!(structs.len() >= 15, "found only {:?}", structs.keys());
    let mut out = BTreeSet::new();
    let mut todo = vec![(String::new(), "RawConfig".to_string())];
    while let Some((prefix, name)) = todo.pop() {
        let fields = structs
            .get(&name)
            .unwrap_or_else(|| panic!("struct {name} not found"));
        for (field, ty) in fields {
            let path = if prefix.is_empty() {
                field.clone()
            } else {
                format!("{prefix}.{field}")
            };
            match nested(ty) {
                Some(inner) => todo.push((path, inner.to_string())),
                None => {
                    out.insert(path);
                }
            }
        }
    }
    out
}

/// Environment variables the code reads: the config's overrides (`config::ENV_VARS`) and every
/// `"LIMITER_…"` literal in the source.
fn code_env() -> BTreeSet<String> {
    let mut out: BTreeSet<String> = limiter_daemon::config::ENV_VARS
        .iter()
        .map(|v| v.to_string())
        .collect();
    let mut dirs = vec![
        root().join("src"),
        root().join("../limiter-ctl/src"),
        root().join("../limiter-common/src"),
    ];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let src = std::fs::read_to_string(&p).unwrap();
                for piece in src.split("\"LIMITER_").skip(1) {
                    let name: String = piece
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    if piece[name.len()..].starts_with('"') {
                        out.insert(format!("LIMITER_{name}"));
                    }
                }
            }
        }
    }
    out.insert("RUST_LOG".to_string());
    out
}

struct Documented {
    fields: BTreeSet<String>,
    env: BTreeSet<String>,
}

/// Rows of the reference: `## [section]` (or `## [[routes]]`, or several sections on one
/// heading) then `| `name` | type | default | effect |`.
fn documented() -> Documented {
    let doc = std::fs::read_to_string(root().join("../docs/configuration.md")).unwrap();
    let mut fields = BTreeSet::new();
    let mut env = BTreeSet::new();
    let mut sections: Vec<String> = Vec::new();
    let mut in_env = false;
    for (n, line) in doc.lines().enumerate() {
        if let Some(h) = line.strip_prefix("## ") {
            in_env = h == "Environment";
            sections = h
                .split('`')
                .filter(|s| s.starts_with('['))
                .map(|s| s.trim_matches(|c| c == '[' || c == ']').to_string())
                .collect();
            continue;
        }
        let Some(name) = line
            .strip_prefix("| `")
            .and_then(|r| r.split_once('`'))
            .map(|(n, _)| n)
        else {
            continue;
        };
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(
            cells.len(),
            4,
            "line {}: want name, type, default, effect",
            n + 1
        );
        assert!(
            cells.iter().all(|c| !c.is_empty()),
            "line {}: an empty cell",
            n + 1
        );
        if in_env {
            env.insert(name.to_string());
        } else {
            assert!(
                !sections.is_empty(),
                "line {}: a row outside a section",
                n + 1
            );
            for s in &sections {
                fields.insert(format!("{s}.{name}"));
            }
        }
    }
    Documented { fields, env }
}

#[test]
fn every_config_field_is_in_the_reference_and_every_row_is_a_field() {
    let code = code_fields();
    assert!(code.len() >= 100, "{} fields: {code:?}", code.len());
    for probe in [
        "engine.shadow",
        "tiers.anon.burst",
        "routes.prefix",
        "kernel.ceiling.sponsor.per_second",
        "store.decision_timeout",
        "store.on_failure",
    ] {
        assert!(code.contains(probe), "the walk missed {probe}");
    }
    let doc = documented();
    let missing: Vec<_> = code.difference(&doc.fields).collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md lacks {missing:?}"
    );
    let stale: Vec<_> = doc.fields.difference(&code).collect();
    assert!(
        stale.is_empty(),
        "documented but not in the code: {stale:?}"
    );
}

#[test]
fn every_environment_variable_is_in_the_reference() {
    let code = code_env();
    assert!(code.len() >= 15, "{code:?}");
    let doc = documented();
    let missing: Vec<_> = code.difference(&doc.env).collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md lacks {missing:?}"
    );
    let stale: Vec<_> = doc.env.difference(&code).collect();
    assert!(stale.is_empty(), "documented but not read: {stale:?}");
}

/// The walk is the parser's view: a file setting one field the walk found is accepted by the
/// real binary up to its value (no "unknown field"), and a made-up field is refused by name.
#[test]
fn the_walked_fields_are_the_ones_check_config_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let check = |toml: &str| {
        let f = dir.path().join("c.toml");
        std::fs::write(&f, toml).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_limiter-daemon"))
            .arg("check-config")
            .arg(&f)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout)
    };
    let refused = check("[store]\nno_such_field = 1\n");
    assert!(refused.contains("no_such_field"), "{refused}");
    for field in code_fields() {
        if field == "http.admin" {
            continue; // refused by design, with its own error
        }
        let (section, name) = field.rsplit_once('.').unwrap_or(("", &field));
        let head = match section {
            "" => String::new(),
            "routes" => "[[routes]]\nprefix = \"/x\"\n".to_string(),
            s => format!("[{s}]\n"),
        };
        // A value of a type no field takes: the error must be about the value, not the name.
        let out = check(&format!("{head}{name} = {{ nonsense = 1 }}\n"));
        assert!(
            !out.contains("unknown field"),
            "{field} is not a field check-config knows: {out}"
        );
    }
}
