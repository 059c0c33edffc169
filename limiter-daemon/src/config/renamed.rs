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
#[rustfmt::skip]
const REMOVED: &[(&str, &str)] = &[
    ("store.sweep_interval", "identities with nothing live are dropped every 60 s"),
    ("http.h2_max_pending_accept_reset_streams", "the rapid-reset guard stays at hyper's 20"),
    ("http.h2_max_local_error_reset_streams", "the rapid-reset guard stays at hyper's 1024"),
    ("http.own_loop", "bodyless HTTP/1.1 requests take the own loop, the rest hyper's server"),
    ("http.batch_scheduling", "the proxy's threads always run SCHED_BATCH"),
    ("store.valkey_count", "a decision is always counted by one pipeline of plain commands"),
];

/// What [`migrate`] found besides moving keys.
#[derive(Debug, Default)]
pub struct Migrated {
    /// One line per old key the file used.
    pub warnings: Vec<String>,
    /// `(old, new)` for each key moved: an error about the new key is located at the old one.
    pub moved: Vec<(&'static str, &'static str)>,
    /// `[tiers.session] multiplier`: `[tiers.session] hourly` as a multiple of the anonymous.
    pub session_multiplier: Option<u32>,
}

/// Rewrites `file` in the current shape.
pub fn migrate(file: &mut Table) -> Result<Migrated, ConfigError> {
    let mut out = Migrated::default();
    for &(old, new) in RENAMED {
        let Some(v) = take(file, old) else { continue };
        let warning = if new == "jwt.daily" && !file.contains_key("jwt") {
            format!(
                "`{old}` is ignored: token holders need a [jwt] section; with one, write `{new}`"
            )
        } else if put(file, new, v) {
            return Err(ConfigError::invalid(
                old,
                format!("set twice, as `{old}` and as its new name `{new}`: keep `{new}`"),
            ));
        } else {
            out.moved.push((old, new));
            format!("`{old}` is renamed `{new}`: read as `{new}`; write that")
        };
        out.warnings.push(warning);
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

/// The table `key` sits in (created on the way when `create`), and the key's last part.
fn parent<'a, 'k>(
    mut t: &'a mut Table,
    key: &'k str,
    create: bool,
) -> Option<(&'a mut Table, &'k str)> {
    let (path, leaf) = key.rsplit_once('.').unwrap_or(("", key));
    for p in path.split('.').filter(|p| !p.is_empty()) {
        if create && !t.contains_key(p) {
            t.insert(p.to_string(), Value::Table(Table::new()));
        }
        t = t.get_mut(p)?.as_table_mut()?;
    }
    Some((t, leaf))
}

fn take(t: &mut Table, key: &str) -> Option<Value> {
    let (t, leaf) = parent(t, key, false)?;
    t.remove(leaf)
}

/// Sets `key`; `true` when it was set already. (Under a non-table the value is dropped, and the
/// parser refuses the non-table.)
fn put(t: &mut Table, key: &str, v: Value) -> bool {
    parent(t, key, true).is_some_and(|(t, leaf)| t.insert(leaf.to_string(), v).is_some())
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
