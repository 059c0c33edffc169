//! `limiter-daemon check-config FILE`: validates (with environment overrides), prints the
//! effective limits, exits non-zero naming the field and line (or the variable) on error.

use std::process::Command;

fn check_config(file: &std::path::Path, env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_limiter-daemon"));
    cmd.arg("check-config").arg(file);
    for var in limiter_daemon::config::ENV_VARS {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run limiter-daemon");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn example() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/limiter.toml")
}

fn row<'a>(out: &'a str, tier: &str) -> Vec<&'a str> {
    out.lines()
        .find(|l| l.starts_with(tier))
        .unwrap_or_else(|| panic!("no {tier} row in:\n{out}"))
        .split_whitespace()
        .collect()
}

#[test]
fn the_example_config_is_valid_and_prints_the_ladder() {
    let (ok, out, err) = check_config(&example(), &[]);
    assert!(ok, "{err}");
    assert_eq!(row(&out, "anon"), ["anon", "120", "600", "1000"]);
    assert_eq!(row(&out, "session"), ["session", "300", "6000", "1000"]);
    assert_eq!(row(&out, "sponsor"), ["sponsor", "2000", "120000", "none"]);
    assert!(out.contains("/reader"), "{out}");
}

#[test]
fn environment_overrides_win_and_are_shown() {
    let (ok, out, err) = check_config(
        &example(),
        &[
            ("TIER_FREE_HOURLY", "700"),
            ("TIER_AUTH_MULTIPLIER", "3"),
            ("QUOTA_ANON", "50"),
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(row(&out, "anon"), ["anon", "120", "700", "50"]);
    assert_eq!(row(&out, "session"), ["session", "300", "2100", "50"]);
    assert!(out.contains("TIER_FREE_HOURLY=700"), "{out}");
}

#[test]
fn a_malformed_environment_value_names_the_variable() {
    let (ok, _, err) = check_config(&example(), &[("TIER_SPONSOR_BURST", "lots")]);
    assert!(!ok);
    assert!(err.contains("TIER_SPONSOR_BURST"), "{err}");
}

#[test]
fn a_bad_field_names_the_field_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.toml");
    std::fs::write(
        &p,
        "[tiers.anon]\nburst = 120\n\n[lockout]\nbase = \"soon\"\n",
    )
    .unwrap();
    let (ok, _, err) = check_config(&p, &[]);
    assert!(!ok);
    assert!(
        err.contains("lockout.base") && err.contains("line 5"),
        "{err}"
    );

    std::fs::write(&p, "[tiers.anon]\nburst = 120\nburts = 3\n").unwrap();
    let (ok, _, err) = check_config(&p, &[]);
    assert!(!ok);
    assert!(err.contains("burts") && err.contains("line 3"), "{err}");

    let (ok, _, err) = check_config(&dir.path().join("missing.toml"), &[]);
    assert!(!ok);
    assert!(err.contains("missing.toml"), "{err}");
}

#[test]
fn an_empty_state_dir_is_an_error_naming_the_field_and_line() {
    // "" resolved to the working directory: the hash secret was written wherever the daemon
    // was started.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("empty-state-dir.toml");
    std::fs::write(
        &p,
        "[kernel]\nmode = \"off\"\n\n[store]\nstate_dir = \"\"\n",
    )
    .unwrap();
    let (ok, _, err) = check_config(&p, &[]);
    assert!(!ok, "accepted an empty state_dir");
    assert!(
        err.contains("store.state_dir") && err.contains("line 5") && err.contains("empty"),
        "{err}"
    );
}

#[test]
fn a_bad_http_field_names_the_field_and_line() {
    // `[http]` is validated with the rest of the file, so its errors carry the line too.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad-http.toml");
    std::fs::write(
        &p,
        "[kernel]\nmode = \"off\"\n\n[http]\napi_listen = [\"127.0.0.1:0\"]\nupstream_max_connections = 0\n",
    )
    .unwrap();
    let (ok, _, err) = check_config(&p, &[]);
    assert!(!ok, "accepted upstream_max_connections = 0");
    assert!(
        err.contains("http.upstream_max_connections") && err.contains("line 6"),
        "{err}"
    );

    std::fs::write(&p, "[http]\nproxy_listen = [\"nope\"]\n").unwrap();
    let (ok, _, err) = check_config(&p, &[]);
    assert!(!ok, "accepted proxy_listen = [\"nope\"]");
    assert!(
        err.contains("http.proxy_listen") && err.contains("line 2"),
        "{err}"
    );
}

/// Every config the project ships loads: `examples/limiter.toml` in the current shape (no
/// warning), and each ```toml block of the docs and the README (a block naming a file this
/// machine lacks may fail only on that file, never on a key).
#[test]
fn every_shipped_config_loads() {
    let (ok, _, err) = check_config(&example(), &[]);
    assert!(
        ok && !err.contains("renamed") && !err.contains("ignored"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let pages = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|p| p.unwrap().path())
        .chain([root.join("README.md")])
        .filter(|p| p.extension().is_some_and(|e| e == "md"));
    let mut blocks = 0;
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        for (i, block) in text.split("```toml\n").skip(1).enumerate() {
            let block = block.split("```").next().unwrap();
            let f = dir.path().join(format!("block{blocks}.toml"));
            std::fs::write(&f, block).unwrap();
            blocks += 1;
            let (ok, _, err) = check_config(&f, &[]);
            let about_a_missing_file = err.contains("/etc/") || err.contains("/var/lib/");
            assert!(
                ok || about_a_missing_file,
                "{} block {i}:\n{block}\n{err}",
                page.display()
            );
        }
    }
    assert!(blocks >= 8, "{blocks} blocks");
}

/// A file in the shape of an earlier release loads, means what it meant (the same effective
/// limits as the current shape) and warns once per old key, naming the new one.
#[test]
fn an_old_style_config_loads_as_its_new_shape_with_one_warning_per_old_key() {
    let dir = tempfile::tempdir().unwrap();
    let jwt = "[jwt]\nalgorithm = \"HS256\"\nsecret = \"0123456789abcdef0123\"\n";
    let old = dir.path().join("old.toml");
    std::fs::write(
        &old,
        format!(
            "[tiers.anon]\nhourly = 50\n[tiers.session]\nburst = 40\nmultiplier = 3\n\
             [quota]\nanon = 70\nsponsor = 900\ntoken = 80\nsoft_delay_ms = 10\n\
             soft_window = 5\nhard_delay_ms = 20\nwarn_threshold = 7\n\
             [store]\nsweep_interval = \"5s\"\n{jwt}"
        ),
    )
    .unwrap();
    let new = dir.path().join("new.toml");
    std::fs::write(
        &new,
        format!(
            "[tiers]\nsoft_delay_ms = 10\nsoft_window = 5\nhard_delay_ms = 20\n\
             warn_threshold = 7\n[tiers.anon]\nhourly = 50\ndaily = 70\n\
             [tiers.session]\nburst = 40\nhourly = 150\n[tiers.sponsor]\ndaily = 900\n\
             {jwt}daily = 80\n"
        ),
    )
    .unwrap();
    let (ok, old_out, err) = check_config(&old, &[]);
    assert!(ok, "{err}");
    let (ok, new_out, new_err) = check_config(&new, &[]);
    assert!(ok, "{new_err}");
    let limits = |out: &str| out.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(limits(&old_out), limits(&new_out));
    assert_eq!(row(&old_out, "session"), ["session", "40", "150", "70"]);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 9, "{err}");
    for new_name in [
        "tiers.anon.daily",
        "tiers.sponsor.daily",
        "jwt.daily",
        "tiers.soft_delay_ms",
        "tiers.soft_window",
        "tiers.hard_delay_ms",
        "tiers.warn_threshold",
        "tiers.session.hourly",
        "store.sweep_interval",
    ] {
        assert_eq!(
            warnings.iter().filter(|w| w.contains(new_name)).count(),
            1,
            "{new_name}: {err}"
        );
    }
    assert!(
        !new_err.contains("WARN"),
        "the current shape warns of nothing: {new_err}"
    );
}

/// The implementation switches a file may still set load, each with one warning naming it.
#[test]
fn the_removed_switches_still_load_with_a_warning_naming_each() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("switches.toml");
    let text = format!(
        "[kernel]\nmode = \"off\"\n\n[http]\nown_loop = false\nbatch_scheduling = false\n\
         [store]\nstate_dir = \"{}\"\nbackend = \"valkey\"\n\
         valkey_address = \"127.0.0.1:6379\"\nvalkey_count = \"script\"\n",
        dir.path().display()
    );
    std::fs::write(&p, text).unwrap();
    let (ok, _, err) = check_config(&p, &[]);
    assert!(ok, "{err}");
    for key in [
        "http.own_loop",
        "http.batch_scheduling",
        "store.valkey_count",
    ] {
        let said: Vec<_> = err
            .lines()
            .filter(|l| l.contains("WARN") && l.contains(&format!("`{key}` is ignored")))
            .collect();
        assert_eq!(said.len(), 1, "{key}: {err}");
    }
}
