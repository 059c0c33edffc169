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

#[test]
fn the_removed_proxy_switches_still_load_with_a_warning_naming_each() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("switches.toml");
    std::fs::write(
        &p,
        "[kernel]\nmode = \"off\"\n\n[http]\nown_loop = false\nbatch_scheduling = false\n",
    )
    .unwrap();
    let (ok, out, err) = check_config(&p, &[]);
    assert!(ok, "{err}");
    let said = format!("{out}{err}");
    for key in ["own_loop", "batch_scheduling"] {
        assert!(said.contains(&format!("[http] {key} is ignored")), "{said}");
    }
}
