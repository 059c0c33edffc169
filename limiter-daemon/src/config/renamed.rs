//! Keys a config file once had. Each renamed key is moved to its new name and each removed one
//! dropped, before the file is read into [`super::RawConfig`], with one warning apiece naming
//! what to write instead: a file valid in an earlier release keeps loading and means what it
//! meant. `docs/configuration.md` lists them under "Renamed and removed keys".

use toml::{Table, Value};

use super::ConfigError;

/// Old dotted key → its new name. `[quota]` held the daily quotas and the scan delay apart from
/// the tiers they belong to.
const RENAMED: &[(&str, &str)] = &[
    ("quota.anon", "tiers.anon.daily"),
    ("quota.sponsor", "tiers.sponsor.daily"),
    ("quota.token", "jwt.daily"),
    ("quota.soft_delay_ms", "tiers.soft_delay_ms"),
    ("quota.soft_window", "tiers.soft_window"),
    ("quota.hard_delay_ms", "tiers.hard_delay_ms"),
    ("quota.warn_threshold", "tiers.warn_threshold"),
];

/// Keys no longer read, with what the daemon does instead.
const REMOVED: &[(&str, &str)] = &[(
    "store.sweep_interval",
    "identities with nothing live are dropped every 60 s (memory is bounded by `store.max_identities`)",
)];

/// What [`migrate`] found besides moving keys.
#[derive(Debug, Default)]
pub struct Migrated {
    /// One line per old key the file used.
    pub warnings: Vec<String>,
    /// `(old, new)` for each key moved: an error about the new key is located at the old one.
    pub moved: Vec<(&'static str, &'static str)>,
    /// `[tiers.session] multiplier`: the session hourly budget as a multiple of the anonymous
    /// one, which `[tiers.session] hourly` now states itself.
    pub session_multiplier: Option<u32>,
}

/// Rewrites `file` in the current shape.
pub fn migrate(file: &mut Table) -> Result<Migrated, ConfigError> {
    let mut out = Migrated::default();
    for &(old, new) in RENAMED {
        let Some(v) = take(file, old) else { continue };
        if new == "jwt.daily" && !file.contains_key("jwt") {
            out.warnings.push(format!(
                "`{old}` is ignored: token holders need a [jwt] section; with one, write `{new}`"
            ));
            continue;
        }
        if get(file, new).is_some() {
            return Err(ConfigError::invalid(
                old,
                format!("set twice, as `{old}` and as its new name `{new}`: keep `{new}`"),
            ));
        }
        put(file, new, v);
        out.moved.push((old, new));
        out.warnings.push(format!(
            "`{old}` is renamed `{new}`: read as `{new}`; write that"
        ));
    }
    for &(old, why) in REMOVED {
        if take(file, old).is_some() {
            out.warnings
                .push(format!("`{old}` is ignored and no longer needed: {why}"));
        }
    }
    const MULTIPLIER: &str = "tiers.session.multiplier";
    if let Some(v) = take(file, MULTIPLIER) {
        let m = v
            .as_integer()
            .and_then(|m| u32::try_from(m).ok())
            .filter(|m| *m > 0)
            .ok_or_else(|| ConfigError::invalid(MULTIPLIER, "must be an integer ≥ 1"))?;
        out.session_multiplier = Some(m);
        out.warnings.push(format!(
            "`{MULTIPLIER}` is replaced by `tiers.session.hourly`, the session budget itself: \
             read as `tiers.anon.hourly` × {m}; write `tiers.session.hourly`"
        ));
    }
    // `[quota]` emptied is gone; anything left in it stays, for the parser to refuse by name.
    if file
        .get("quota")
        .and_then(Value::as_table)
        .is_some_and(Table::is_empty)
    {
        file.remove("quota");
    }
    Ok(out)
}

fn get<'a>(t: &'a Table, key: &str) -> Option<&'a Value> {
    let (parent, leaf) = key.rsplit_once('.').unwrap_or(("", key));
    parent
        .split('.')
        .filter(|p| !p.is_empty())
        .try_fold(t, |t, p| t.get(p)?.as_table())?
        .get(leaf)
}

fn take(t: &mut Table, key: &str) -> Option<Value> {
    let (parent, leaf) = key.rsplit_once('.').unwrap_or(("", key));
    parent
        .split('.')
        .filter(|p| !p.is_empty())
        .try_fold(t, |t, p| t.get_mut(p)?.as_table_mut())?
        .remove(leaf)
}

/// Sets `key`, creating the tables on its way (an old key's value under a non-table is left for
/// the parser to refuse).
fn put(t: &mut Table, key: &str, v: Value) {
    let (parent, leaf) = key.rsplit_once('.').unwrap_or(("", key));
    let mut at = t;
    for p in parent.split('.').filter(|p| !p.is_empty()) {
        let next = at
            .entry(p.to_string())
            .or_insert_with(|| Value::Table(Table::new()));
        match next.as_table_mut() {
            Some(n) => at = n,
            None => return,
        }
    }
    at.insert(leaf.to_string(), v);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str) -> (Table, Result<Migrated, ConfigError>) {
        let mut t: Table = toml::from_str(text).unwrap();
        let m = migrate(&mut t);
        (t, m)
    }

    #[test]
    fn each_old_key_moves_with_one_warning_naming_its_new_name() {
        let (t, m) = run(
            "[quota]\nanon = 5\nsoft_window = 3\n[tiers.session]\nmultiplier = 4\n\
             [store]\nsweep_interval = \"1s\"\n",
        );
        let m = m.unwrap();
        assert_eq!(t["tiers"]["anon"]["daily"].as_integer(), Some(5));
        assert_eq!(t["tiers"]["soft_window"].as_integer(), Some(3));
        assert!(
            !t.contains_key("quota")
                && !t["store"]
                    .as_table()
                    .unwrap()
                    .contains_key("sweep_interval")
        );
        assert_eq!(m.session_multiplier, Some(4));
        assert_eq!(m.warnings.len(), 4, "{:?}", m.warnings);
        for new in [
            "tiers.anon.daily",
            "tiers.soft_window",
            "tiers.session.hourly",
        ] {
            assert!(
                m.warnings.iter().any(|w| w.contains(new)),
                "{new}: {:?}",
                m.warnings
            );
        }
    }

    #[test]
    fn old_and_new_name_together_is_an_error_and_a_token_quota_without_jwt_is_ignored() {
        let (_, m) = run("[quota]\nanon = 5\n[tiers.anon]\ndaily = 6\n");
        let err = m.unwrap_err().to_string();
        assert!(
            err.contains("quota.anon") && err.contains("tiers.anon.daily"),
            "{err}"
        );
        let (t, m) = run("[quota]\ntoken = 5\n");
        assert!(t.is_empty());
        assert!(m.unwrap().warnings[0].contains("[jwt]"));
        let (t, _) = run("[jwt]\nalgorithm = \"HS256\"\n[quota]\ntoken = 5\n");
        assert_eq!(t["jwt"]["daily"].as_integer(), Some(5));
    }
}
