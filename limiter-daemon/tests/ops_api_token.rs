//! The decision API token against the real daemon binary: with `[http] api_token_file` set,
//! `/v1/decide` and `/v1/auth` answer 401 (`WWW-Authenticate: Bearer`, problem+json) without
//! the token or with a wrong one, and decide with it; `check-config` warns on stderr (exit 0)
//! when the API listens off loopback without a token.

mod ops_support;

use std::process::Command;

use ops_support::*;

const TOKEN: &str = "ops-test-token-0123456789abcdef";

#[test]
fn decision_api_needs_the_token_when_one_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("api-token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let api = free_addr();
    let text = config_text(
        dir.path(),
        &format!(
            "[admin]\nlisten = \"\"\n[http]\napi_listen = [\"{api}\"]\napi_token_file = {:?}\n[metrics]\nlisten = \"\"\n",
            file.display().to_string()
        ),
    );
    let _d = Daemon::start(dir.path(), &text, &[], api);
    for (auth, status) in [
        (None, 401),
        (Some("wrong-token-0123456789abcdef"), 401),
        (Some(&TOKEN[..TOKEN.len() - 1]), 401),
        (Some(TOKEN), 200),
    ] {
        let a = decide(api, "203.0.113.5", "/x", auth);
        assert_eq!(a.status, status, "{auth:?}: {a:?}");
        if status == 401 {
            assert_eq!(a.header("www-authenticate"), "Bearer");
            assert_eq!(a.header("content-type"), "application/problem+json");
            assert_eq!(a.json()["status"], 401);
        } else {
            assert_eq!(a.json()["action"], "allow");
        }
        let bearer = auth.map(|t| format!("Bearer {t}"));
        let mut h = vec![("x-original-uri", "/x")];
        if let Some(b) = &bearer {
            h.push(("authorization", b.as_str()));
        }
        let a = request(api, "GET", "/v1/auth", &h, "");
        assert_eq!(
            a.status,
            if status == 200 { 204 } else { 401 },
            "/v1/auth {auth:?}: {a:?}"
        );
    }
}

fn check_config(dir: &std::path::Path, http: &str) -> (bool, String) {
    let p = dir.join("check.toml");
    std::fs::write(&p, format!("[kernel]\nmode = \"off\"\n[http]\n{http}")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_limiter-daemon"))
        .arg("check-config")
        .arg(&p)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_config_warns_when_the_api_is_off_loopback_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, err) = check_config(dir.path(), "api_listen = [\"0.0.0.0:8081\"]\n");
    assert!(ok, "{err}");
    assert!(
        err.contains("warning")
            && err.contains("0.0.0.0:8081")
            && err.contains("http.api_token_file"),
        "{err}"
    );
    let (ok, err) = check_config(dir.path(), "api_listen = [\"127.0.0.1:8081\"]\n");
    assert!(ok && !err.contains("warning"), "{err}");
    let file = dir.path().join("api-token");
    std::fs::write(&file, TOKEN).unwrap();
    let (ok, err) = check_config(
        dir.path(),
        &format!(
            "api_listen = [\"0.0.0.0:8081\"]\napi_token_file = {:?}\n",
            file.display().to_string()
        ),
    );
    assert!(ok && !err.contains("warning"), "{err}");
}

/// `limiter-daemon run` with `text` as its config and `env_token` as `LIMITER_ADMIN_TOKEN`,
/// expected to refuse to start: its stderr.
fn refused_start(dir: &std::path::Path, text: &str, env_token: Option<&str>) -> String {
    let config = dir.join("limiter.toml");
    std::fs::write(&config, text).unwrap();
    let stderr = dir.join("refused.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_limiter-daemon"));
    cmd.args(["run", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap());
    match env_token {
        Some(t) => cmd.env("LIMITER_ADMIN_TOKEN", t),
        None => cmd.env_remove("LIMITER_ADMIN_TOKEN"),
    };
    let mut child = cmd.spawn().unwrap();
    // A daemon that accepts the token runs on: stop it and fail rather than wait for ever.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if std::time::Instant::now() > deadline {
            limiter_tests::process::terminate(&mut child, std::time::Duration::from_secs(5));
            break None;
        }
        std::thread::park_timeout(std::time::Duration::from_millis(25));
    };
    let err = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert!(
        status.is_some_and(|s| !s.success()),
        "the daemon started: {err}"
    );
    err
}

/// Issue 21, P8: an admin token under 16 characters (from the environment or a file), or a
/// token file other users may read, stops the daemon at start with the source named; the
/// daemon used to run with `LIMITER_ADMIN_TOKEN=abc` and a 0644 token file.
#[test]
fn a_weak_admin_token_stops_the_daemon_at_start_naming_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let admin = free_addr();
    let base = config_text(
        dir.path(),
        &format!("[admin]\nlisten = \"{admin}\"\n[http]\n[metrics]\nlisten = \"\"\n"),
    );
    let err = refused_start(dir.path(), &base, Some("hunter2"));
    assert!(
        err.contains("LIMITER_ADMIN_TOKEN") && err.contains("at least 16"),
        "{err}"
    );
    let file = dir.path().join("admin-token-file");
    let with_file = config_text(
        dir.path(),
        &format!(
            "[admin]\nlisten = \"{admin}\"\ntoken_file = {:?}\n[http]\n[metrics]\nlisten = \"\"\n",
            file.display().to_string()
        ),
    );
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(&file, "short\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = refused_start(dir.path(), &with_file, None);
    assert!(
        err.contains(&file.display().to_string()) && err.contains("at least 16"),
        "{err}"
    );
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = refused_start(dir.path(), &with_file, None);
    assert!(
        err.contains(&file.display().to_string()) && err.contains("chmod 600"),
        "{err}"
    );
}
