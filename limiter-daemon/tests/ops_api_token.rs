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
