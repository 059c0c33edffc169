//! The admin API and limiterctl against the real daemon binary (kernel off; the kernel half is
//! in `admin_kernel.rs`): the token on every route of the router's own table, each endpoint's
//! answers to good and bad input, keys issued with limiterctl and used through the proxy,
//! lockouts that a restart does not bring back, limiterctl's tables, JSON and exit codes.

use limiter_daemon::admin::route_list;
use limiter_tests::client::http;
use limiter_tests::daemon::Daemon;
use limiter_tests::eventually;
use serde_json::{json, Value};

fn daemon() -> (tempfile::TempDir, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), "", "");
    (dir, d)
}

#[test]
fn every_route_needs_the_token() {
    let (_dir, d) = daemon();
    let routes = route_list();
    assert!(routes.len() >= 15, "{routes:?}");
    let good = format!("Bearer {}", d.token());
    for r in &routes {
        for (label, auth) in [
            ("none", None),
            ("wrong", Some("Bearer not-the-token")),
            ("right", Some(good.as_str())),
        ] {
            let headers: Vec<(&str, &str)> =
                auth.map(|a| ("authorization", a)).into_iter().collect();
            let resp = http(d.admin, r.method, r.example, &headers, None);
            if label == "right" {
                assert_ne!(
                    resp.status, 401,
                    "{} {} refused the right token: {}",
                    r.method, r.example, resp.body
                );
                assert_ne!(resp.status, 405, "{} {} is not routed", r.method, r.example);
            } else {
                assert_eq!(
                    resp.status, 401,
                    "{} {} with {label} token: {}",
                    r.method, r.example, resp.body
                );
                assert!(
                    resp.header("www-authenticate")
                        .is_some_and(|v| v.starts_with("Bearer")),
                    "{} {}: {:?}",
                    r.method,
                    r.example,
                    resp.headers
                );
                assert_eq!(resp.json()["field"], "Authorization");
            }
        }
    }
    // Unknown paths are behind the token too.
    assert_eq!(
        http(d.admin, "GET", "/admin/v1/nope", &[], None).status,
        401
    );
}

/// `(method, path, content type, body, status, field)`.
type Case<'a> = (&'a str, &'a str, Option<&'a str>, &'a str, u16, &'a str);

#[test]
fn bad_input_is_a_4xx_naming_the_field() {
    let (_dir, d) = daemon();
    let big = format!(
        "{{\"ip\":\"1.2.3.4\",\"for\":\"1m\",\"reason\":\"{}\"}}",
        "x".repeat(70_000)
    );
    let cases: Vec<Case> = vec![
        ("GET", "/admin/v1/clients/1.2.3.400", None, "", 400, "ip"),
        (
            "POST",
            "/admin/v1/lockouts",
            Some("application/json"),
            r#"{"ip":"nope","for":"1m"}"#,
            400,
            "ip",
        ),
        (
            "POST",
            "/admin/v1/lockouts",
            Some("application/json"),
            r#"{"ip":"10.0.0.0/33","for":"1m"}"#,
            400,
            "ip",
        ),
        (
            "POST",
            "/admin/v1/lockouts",
            Some("application/json"),
            r#"{"ip":"10.0.0.1/8","for":"1m"}"#,
            400,
            "ip",
        ),
        (
            "POST",
            "/admin/v1/lockouts",
            Some("application/json"),
            r#"{"ip":"10.0.0.0/7","for":"1m"}"#,
            422,
            "ip",
        ),
        (
            "POST",
            "/admin/v1/lockouts",
            Some("application/json"),
            r#"{"ip":"2000::/15","for":"1m"}"#,
            422,
            "ip",
        ),
        (
            "POST",
            "/admin/v1/lockouts",
            Some("application/json"),
            r#"{"ip":"1.2.3.4","for":"soon"}"#,
            400,
            "for",
        ),
        (
            "POST",
            "/admin/v1/lockouts",
            Some("application/json"),
            r#"{"ip":"1.2.3.4","for":"0s"}"#,
            400,
            "for",
        ),
        (
            "POST",
            "/admin/v1/lockouts",
            Some("application/json"),
            r#"{"ip":"1.2.3.4","for":"999999999h"}"#,
            400,
            "for",
        ),
        (
            "POST",
            "/admin/v1/lists/deny",
            Some("application/json"),
            r#"{"cidr":"10.0.0.0/8","for":"999999999h"}"#,
            400,
            "for",
        ),
        // Through humantime `10M` was ten months and `1y` a year.
        (
            "POST",
            "/admin/v1/lockouts",
            Some("application/json"),
            r#"{"ip":"1.2.3.4","for":"10M"}"#,
            400,
            "for",
        ),
        (
            "POST",
            "/admin/v1/lists/deny",
            Some("application/json"),
            r#"{"cidr":"10.0.0.0/8","for":"1y"}"#,
            400,
            "for",
        ),
        // A missing field is named, not reported as `body`.
        (
            "POST",
            "/admin/v1/lockouts",
            Some("application/json"),
            r#"{"ip":"1.2.3.4"}"#,
            400,
            "for",
        ),
        (
            "POST",
            "/admin/v1/lists/deny",
            Some("application/json"),
            r#"{"for":"1h"}"#,
            400,
            "cidr",
        ),
        // Escapes that do not decode to UTF-8 were axum's text/plain 400.
        ("DELETE", "/admin/v1/lockouts/%ff", None, "", 400, "ip"),
        ("GET", "/admin/v1/clients/%c3%28", None, "", 400, "ip"),
        ("DELETE", "/admin/v1/lists/deny/%ff", None, "", 400, "cidr"),
        ("GET", "/admin/v1/keys/%fe", None, "", 400, "id"),
        // A method a known path does not serve was an empty 405.
        ("PUT", "/admin/v1/lockouts", None, "", 405, "method"),
        (
            "POST",
            "/admin/v1/lockouts",
            Some("application/json"),
            r#"{"ip":"1.2.3.4","for":"1m","x":1}"#,
            400,
            "x",
        ),
        (
            "POST",
            "/admin/v1/lockouts",
            Some("application/json"),
            r#"{"ip":"1.2.3.4","#,
            400,
            "body",
        ),
        (
            "POST",
            "/admin/v1/lockouts",
            Some("application/json"),
            "[1]",
            400,
            "body",
        ),
        (
            "POST",
            "/admin/v1/lockouts",
            Some("text/plain"),
            r#"{"ip":"1.2.3.4","for":"1m"}"#,
            415,
            "Content-Type",
        ),
        (
            "POST",
            "/admin/v1/lockouts",
            None,
            r#"{"ip":"1.2.3.4","for":"1m"}"#,
            415,
            "Content-Type",
        ),
        (
            "POST",
            "/admin/v1/lockouts",
            Some("application/json"),
            &big,
            413,
            "body",
        ),
        ("GET", "/admin/v1/lockouts?limit=0", None, "", 400, "limit"),
        (
            "GET",
            "/admin/v1/lockouts?limit=abc",
            None,
            "",
            400,
            "limit",
        ),
        (
            "GET",
            "/admin/v1/lockouts?cursor=zz",
            None,
            "",
            400,
            "cursor",
        ),
        (
            "DELETE",
            "/admin/v1/lockouts/192.0.2.77",
            None,
            "",
            404,
            "ip",
        ),
        ("DELETE", "/admin/v1/lockouts/bogus", None, "", 400, "ip"),
        ("GET", "/admin/v1/lists/grey", None, "", 404, "kind"),
        (
            "POST",
            "/admin/v1/lists/deny",
            Some("application/json"),
            r#"{"cidr":"300.0.0.0/8"}"#,
            400,
            "cidr",
        ),
        (
            "POST",
            "/admin/v1/lists/allow",
            Some("application/json"),
            r#"{"cidr":"10.0.0.0/8","for":"1h"}"#,
            422,
            "for",
        ),
        (
            "POST",
            "/admin/v1/lists/deny",
            Some("application/json"),
            r#"{"cidr":"10.0.0.0/8","for":"1 fortnight"}"#,
            400,
            "for",
        ),
        (
            "DELETE",
            "/admin/v1/lists/deny/10.9.0.0%2F16",
            None,
            "",
            404,
            "cidr",
        ),
        (
            "POST",
            "/admin/v1/keys",
            Some("application/json"),
            r#"{"tier":"gold"}"#,
            400,
            "tier",
        ),
        (
            "POST",
            "/admin/v1/keys",
            Some("application/json"),
            r#"{"hourlyLimit":0}"#,
            422,
            "hourlyLimit",
        ),
        (
            "POST",
            "/admin/v1/keys",
            Some("application/json"),
            r#"{"hourlyLimit":-5}"#,
            400,
            "hourlyLimit",
        ),
        (
            "POST",
            "/admin/v1/keys",
            Some("application/json"),
            r#"{"hourlyLimit":99999999999}"#,
            422,
            "hourlyLimit",
        ),
        (
            "POST",
            "/admin/v1/keys",
            Some("application/json"),
            r#"{"hourlyLimit":"ten"}"#,
            400,
            "hourlyLimit",
        ),
        ("GET", "/admin/v1/keys/0badc0de", None, "", 404, "id"),
        ("DELETE", "/admin/v1/keys/0badc0de", None, "", 404, "id"),
        ("GET", "/admin/v1/keys/NOTHEX", None, "", 400, "id"),
        (
            "POST",
            "/admin/v1/explain",
            Some("application/json"),
            r#"{"ip":"x","method":"GET","path":"/"}"#,
            400,
            "ip",
        ),
        (
            "POST",
            "/admin/v1/explain",
            Some("application/json"),
            r#"{"method":"GET","path":"/"}"#,
            400,
            "ip",
        ),
    ];
    let token = format!("Bearer {}", d.token());
    for (method, path, ct, body, status, field) in cases {
        let mut headers = vec![("authorization", token.as_str())];
        if let Some(ct) = ct {
            headers.push(("content-type", ct));
        }
        let body = (!body.is_empty()).then_some(body.as_bytes());
        let r = http(d.admin, method, path, &headers, body);
        assert_eq!(r.status, status, "{method} {path}: {}", r.body);
        assert_eq!(
            r.header("content-type"),
            Some("application/problem+json"),
            "{method} {path}"
        );
        let v = r.json();
        assert_eq!(v["field"], field, "{method} {path}: {v}");
        assert_eq!(v["status"], status);
    }
}

/// `POST /admin/v1/reload` runs the daemon's one reloader (the one SIGHUP runs): a changed
/// burst is applied and listed, a broken file is a 422 naming its field and line with the old
/// burst still enforced, and a moved admin listener needs a restart.
#[test]
fn reload_through_the_api_applies_a_good_file_and_refuses_a_broken_one() {
    let (_dir, d) = daemon();
    let original = std::fs::read_to_string(&d.config).unwrap();
    let decide = |ip: &str| d.decide(ip)["action"].as_str().unwrap().to_string();
    let r = d.admin("POST", "/admin/v1/reload", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), json!({ "applied": true, "changes": [] }));

    std::fs::write(&d.config, format!("{original}[tiers.anon]\nburst = 2\n")).unwrap();
    let r = d.admin("POST", "/admin/v1/reload", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["applied"], true);
    assert!(
        v["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c.as_str().unwrap().starts_with("tiers.anon.burst")),
        "{v}"
    );
    assert_eq!(decide("198.51.100.7"), "allow");
    assert_eq!(decide("198.51.100.7"), "allow");
    assert_eq!(
        decide("198.51.100.7"),
        "reject",
        "the new burst of 2 applies"
    );

    let broken = format!("{original}[tiers.anon]\nburst = 0\n");
    let line = broken.lines().count();
    std::fs::write(&d.config, broken).unwrap();
    let r = d.admin("POST", "/admin/v1/reload", None);
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let v = r.json();
    assert_eq!(v["field"], "tiers.anon.burst", "{v}");
    assert_eq!(v["line"], line, "{v}");
    assert_eq!(decide("198.51.100.8"), "allow");
    assert_eq!(decide("198.51.100.8"), "allow");
    assert_eq!(
        decide("198.51.100.8"),
        "reject",
        "the old burst of 2 still holds"
    );
    // The operator's way: `limiterctl reload` reading the very file it broke. It still finds
    // the daemon through the file's [admin] section and reports the daemon's refusal (exit 1,
    // field and line), not "unreachable".
    let out = std::process::Command::new(limiter_tests::ctl_binary())
        .arg("--config")
        .arg(&d.config)
        .arg("reload")
        .env_remove("LIMITER_ADMIN_URL")
        .env_remove("LIMITER_ADMIN_TOKEN")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("refused (422)"), "{err}");
    assert!(err.contains(&format!("line {line}")), "{err}");

    // A value of the wrong type was answered `"field": "config"` with no field in the detail.
    let lots = format!("{original}[tiers.anon]\nburst = \"lots\"\n");
    std::fs::write(&d.config, &lots).unwrap();
    let r = d.admin("POST", "/admin/v1/reload", None);
    assert_eq!(r.status, 422, "{}", r.body);
    let v = r.json();
    assert_eq!(v["field"], "tiers.anon.burst", "{v}");
    assert_eq!(v["line"], lots.lines().count(), "{v}");
    assert!(
        v["detail"].as_str().unwrap().contains("tiers.anon.burst"),
        "{v}"
    );
    // A TOML syntax error made limiterctl exit 3 ("cannot be used") without trying the
    // daemon; it now reaches the daemon through the [admin] section that still reads, and the
    // daemon's refusal names the line.
    let syntax = format!("{original}[tiers.anon\nburst = 2\n");
    let line = syntax.lines().count() - 1;
    std::fs::write(&d.config, syntax).unwrap();
    let out = std::process::Command::new(limiter_tests::ctl_binary())
        .arg("--config")
        .arg(&d.config)
        .arg("reload")
        .env_remove("LIMITER_ADMIN_URL")
        .env_remove("LIMITER_ADMIN_TOKEN")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("refused (422)"), "{err}");
    assert!(err.contains(&format!("line {line}")), "{err}");

    let moved = original.replace(
        &format!("[admin]\nlisten = \"{}\"", d.admin),
        "[admin]\nlisten = \"127.0.0.1:1\"",
    );
    assert_ne!(moved, original);
    std::fs::write(&d.config, format!("{moved}[tiers.anon]\nburst = 2\n")).unwrap();
    let r = d.admin("POST", "/admin/v1/reload", None);
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(r.json()["field"], "admin.listen", "{}", r.body);
}

#[test]
fn endpoints_answer_their_happy_paths() {
    let (_dir, d) = daemon();
    // Lockouts: an address and a CIDR, listed in pages, lifted.
    let r = d.admin(
        "POST",
        "/admin/v1/lockouts",
        Some(&json!({"ip": "192.0.2.9", "for": "10m", "reason": "scraper"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["ip"], "192.0.2.9");
    let r = d.admin(
        "POST",
        "/admin/v1/lockouts",
        Some(&json!({"ip": "198.51.100.0/24", "for": "1h", "reason": "range"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let p1 = d.admin("GET", "/admin/v1/lockouts?limit=1", None).json();
    assert_eq!(p1["items"].as_array().unwrap().len(), 1, "{p1}");
    let cursor = p1["nextCursor"].as_str().unwrap().replace('/', "%2F");
    let p2 = d
        .admin(
            "GET",
            &format!("/admin/v1/lockouts?limit=1&cursor={cursor}"),
            None,
        )
        .json();
    assert_eq!(p2["items"].as_array().unwrap().len(), 1, "{p2}");
    assert!(p2["nextCursor"].is_null(), "{p2}");
    let ips: Vec<&str> = [&p1, &p2]
        .iter()
        .map(|p| p["items"][0]["ip"].as_str().unwrap())
        .collect();
    assert_eq!(ips, ["192.0.2.9", "198.51.100.0/24"]);
    assert_eq!(p2["items"][0]["reason"], "range");
    assert!(p2["items"][0]["remainingSecs"].as_u64().unwrap() > 3500);
    // The locked address is refused on the decision API; one inside the CIDR too.
    for ip in ["192.0.2.9", "198.51.100.77"] {
        let v = d.decide(ip);
        assert_eq!(v["action"], "reject", "{ip}: {v}");
    }
    let c = d.admin("GET", "/admin/v1/clients/192.0.2.9", None).json();
    assert_eq!(c["lockout"]["level"], 1, "{c}");
    assert_eq!(c["windows"][0]["window"], "burst");
    assert_eq!(
        d.admin("DELETE", "/admin/v1/lockouts/198.51.100.0%2F24", None)
            .status,
        200
    );
    assert_eq!(
        d.admin("DELETE", "/admin/v1/lockouts/192.0.2.9", None)
            .status,
        200
    );
    assert_eq!(
        d.admin("GET", "/admin/v1/lockouts", None).json()["items"],
        json!([])
    );
    // Lists.
    let r = d.admin(
        "POST",
        "/admin/v1/lists/deny",
        Some(&json!({"cidr": "203.0.113.0/24", "for": "1h", "reason": "abuse"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let l = d.admin("GET", "/admin/v1/lists/deny", None).json();
    assert_eq!(l["items"][0]["cidr"], "203.0.113.0/24", "{l}");
    assert_eq!(
        d.admin(
            "POST",
            "/admin/v1/lists/allow",
            Some(&json!({"cidr": "10.1.0.0/16"}))
        )
        .status,
        201
    );
    assert_eq!(
        d.admin("DELETE", "/admin/v1/lists/deny/203.0.113.0%2F24", None)
            .status,
        200
    );
    assert_eq!(
        d.admin("DELETE", "/admin/v1/lists/allow/10.1.0.0%2F16", None)
            .status,
        200
    );
    // Keys: list and show never carry a secret.
    let k = d
        .admin(
            "POST",
            "/admin/v1/keys",
            Some(&json!({"owner": "ops", "note": "ci"})),
        )
        .json();
    let id = k["id"].as_str().unwrap();
    let secret = k["key"]
        .as_str()
        .unwrap()
        .splitn(3, '_')
        .nth(2)
        .unwrap()
        .to_string();
    for path in ["/admin/v1/keys".to_string(), format!("/admin/v1/keys/{id}")] {
        let r = d.admin("GET", &path, None);
        assert_eq!(r.status, 200);
        assert!(
            !r.body.contains(&secret) && !r.body.contains("secret"),
            "{}",
            r.body
        );
    }
    // Kernel, explain (counts nothing), config.
    let kv = d.admin("GET", "/admin/v1/kernel", None).json();
    assert_eq!(kv["attached"], false, "{kv}");
    let body = json!({"ip": "192.0.2.50", "method": "GET", "path": "/"});
    let e1 = d.admin("POST", "/admin/v1/explain", Some(&body)).json();
    let e2 = d.admin("POST", "/admin/v1/explain", Some(&body)).json();
    assert_eq!(e1["action"], "allow");
    assert_eq!(e1["windows"], e2["windows"], "explain counted something");
    let cfg = d.admin("GET", "/admin/v1/config", None).json();
    assert_eq!(cfg["file"]["admin"]["listen"], d.admin.to_string(), "{cfg}");
}

fn tier_of(d: &Daemon, key: &str, path: &str) -> (u16, String) {
    let r = http(d.proxy, "GET", path, &[("x-api-key", key)], None);
    (
        r.status,
        r.header("x-ratelimit-tier").unwrap_or("").to_string(),
    )
}

#[test]
fn keys_issued_with_limiterctl_meter_revoke_and_survive_a_restart() {
    let (_dir, mut d) = daemon();
    let (code, out, err) = d.ctl(&[
        "keys",
        "issue",
        "--hourly-limit",
        "3",
        "--owner",
        "acme",
        "--json",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let issued: Value = serde_json::from_str(&out).unwrap();
    let key = issued["key"].as_str().unwrap().to_string();
    let id = issued["id"].as_str().unwrap().to_string();
    let secret = key.splitn(3, '_').nth(2).unwrap().to_string();
    // Pending: one rung down; then sponsor once the lookup has landed.
    assert_eq!(tier_of(&d, &key, "/other"), (200, "session".to_string()));
    eventually("the key to verify", || {
        (tier_of(&d, &key, "/other").1 == "sponsor").then_some(())
    });
    // Its own hourly limit on the key_limit route.
    for n in 0..3 {
        assert_eq!(
            tier_of(&d, &key, "/api/feeds"),
            (200, "sponsor".to_string()),
            "request {n}"
        );
    }
    let r = http(d.proxy, "GET", "/api/feeds", &[("x-api-key", &key)], None);
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.json()["reason"], "key_hourly", "{}", r.body);
    // Revoked: metered down on the very next request.
    let (code, out, err) = d.ctl(&["keys", "revoke", &id]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("revoked {id}")), "{out}");
    let (_, tier) = tier_of(&d, &key, "/other");
    assert_ne!(tier, "sponsor");
    // Known after a restart, still revoked; a second key still verifies.
    let k2 = d
        .admin("POST", "/admin/v1/keys", None.or(Some(&json!({}))))
        .json();
    let key2 = k2["key"].as_str().unwrap().to_string();
    d.restart();
    let shown = d.admin("GET", &format!("/admin/v1/keys/{id}"), None);
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert_eq!(shown.json()["revoked"], true);
    assert_ne!(tier_of(&d, &key, "/other").1, "sponsor");
    eventually("the second key to verify after the restart", || {
        (tier_of(&d, &key2, "/other").1 == "sponsor").then_some(())
    });
    // The secrets appear in no log line, nor in the store's files in the clear.
    let logs = d.logs();
    assert!(logs.contains("API key issued"), "{logs}");
    for s in [&secret, &key, &key2] {
        assert!(!logs.contains(s.as_str()), "a key secret reached the log");
    }
    for entry in std::fs::read_dir(d.dir.join("state")).unwrap() {
        let text = std::fs::read(entry.unwrap().path()).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&text).contains(&secret),
            "secret stored in the clear"
        );
    }
}

#[test]
fn a_lifted_lockout_stays_lifted_across_a_restart() {
    let (_dir, mut d) = daemon();
    let decide = |d: &Daemon, ip: &str| d.decide(ip)["action"].clone();
    assert_eq!(
        d.admin(
            "POST",
            "/admin/v1/lockouts",
            Some(&json!({"ip": "192.0.2.20", "for": "1h"}))
        )
        .status,
        201
    );
    assert_eq!(
        d.admin(
            "POST",
            "/admin/v1/lockouts",
            Some(&json!({"ip": "192.0.2.21", "for": "1h"}))
        )
        .status,
        201
    );
    assert_eq!(decide(&d, "192.0.2.20"), "reject");
    assert_eq!(
        d.admin("DELETE", "/admin/v1/lockouts/192.0.2.20", None)
            .status,
        200
    );
    d.restart();
    assert_eq!(decide(&d, "192.0.2.20"), "allow");
    // The one not lifted is still in force after the restart.
    assert_eq!(decide(&d, "192.0.2.21"), "reject");
}

#[test]
fn limiterctl_tables_json_and_exit_codes() {
    let (_dir, d) = daemon();
    let (code, out, err) = d.ctl(&[
        "lockouts",
        "add",
        "192.0.2.30",
        "--for",
        "10m",
        "--reason",
        "probe",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("locked 192.0.2.30 until "), "{out}");
    let (code, out, _) = d.ctl(&["lockouts", "list"]);
    assert_eq!(code, 0);
    let mut lines = out.lines();
    let head: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        head,
        ["IP", "UNTIL", "LEFT(s)", "LEVEL", "CAUSE", "REASON", "SOURCE"],
        "{out}"
    );
    let row = lines.next().unwrap();
    assert!(row.starts_with("192.0.2.30 "), "{out}");
    assert!(row.contains(" manual ") && row.contains(" probe "), "{out}");
    // --json before the verb, after it, at the end: the same JSON.
    for args in [
        vec!["--json", "lockouts", "list"],
        vec!["lockouts", "--json", "list"],
        vec!["lockouts", "list", "--json"],
    ] {
        let (code, out, err) = d.ctl(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        let v: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"));
        assert_eq!(v["items"][0]["ip"], "192.0.2.30");
    }
    for args in [
        &["keys", "list"][..],
        &["kernel"],
        &["config"],
        &["clients", "show", "192.0.2.30"],
        &[
            "explain",
            "--ip",
            "192.0.2.31",
            "--path",
            "/x",
            "--header",
            "User-Agent: t",
        ],
        &["deny", "list"],
        &["allow", "list"],
    ] {
        let (code, out, err) = d.ctl(args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        let mut json_args = args.to_vec();
        json_args.push("--json");
        let (code, out, err) = d.ctl(&json_args);
        assert_eq!(code, 0, "{json_args:?}: {err}");
        serde_json::from_str::<Value>(&out).unwrap_or_else(|e| panic!("{json_args:?}: {e}: {out}"));
    }
    let (code, out, err) = d.ctl(&["deny", "add", "203.0.113.0/24", "--for", "1h"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("added 203.0.113.0/24 (until "), "{out}");
    let (code, out, err) = d.ctl(&["deny", "remove", "203.0.113.0/24", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["removed"],
        true
    );
    // 1: refused by the daemon (nothing to lift).
    let (code, _, err) = d.ctl(&["lockouts", "remove", "192.0.2.99"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("404") && err.contains("field: ip"), "{err}");
    // 2: bad arguments, before anything is sent (the daemon's log shows no request).
    for args in [
        &["lockouts", "add", "192.0.2.300", "--for", "1m"][..],
        &["lockouts", "add", "192.0.2.3", "--for", "soon"],
        // Months, years and capitals are not units (`10M` was ten months).
        &["lockouts", "add", "192.0.2.3", "--for", "10M"],
        &["deny", "add", "10.0.0.0/8", "--for", "1y"],
        &["deny", "add", "10.0.0.1/8"],
        &["keys", "issue", "--tier", "gold"],
        &["keys", "issue", "--hourly-limit", "0"],
        &["keys", "show", "XYZ"],
        &["lockouts", "add", "10.0.0.0/4", "--for", "1m"],
        &["explain", "--ip", "1.2.3.4", "--header", "nocolon"],
        &["frobnicate"],
    ] {
        let (code, _, err) = d.ctl(args);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
    // 3: nothing listening.
    let out = std::process::Command::new(limiter_tests::ctl_binary())
        .args([
            "--url",
            &format!("http://{}", limiter_tests::free_addr()),
            "--token",
            "t",
            "kernel",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The address and token from the local config and its generated token file.
    let out = std::process::Command::new(limiter_tests::ctl_binary())
        .args(["--config"])
        .arg(&d.config)
        .args(["--json", "keys", "list"])
        .env_remove("LIMITER_ADMIN_URL")
        .env_remove("LIMITER_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And from the environment (a wrong token there is refused: exit 1).
    let out = std::process::Command::new(limiter_tests::ctl_binary())
        .args(["kernel"])
        .env("LIMITER_ADMIN_URL", format!("http://{}", d.admin))
        .env("LIMITER_ADMIN_TOKEN", "wrong")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_address_lockout_keeps_the_operators_reason_across_a_restart() {
    let (_dir, mut d) = daemon();
    let r = d.admin(
        "POST",
        "/admin/v1/lockouts",
        Some(&json!({"ip": "192.0.2.40", "for": "1h", "reason": "scraping /search"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["reason"], "scraping /search", "{}", r.body);
    let (code, out, err) = d.ctl(&["lockouts", "add", "192.0.2.41", "--for", "1h"]);
    assert_eq!(code, 0, "{out}{err}");
    let item = |d: &Daemon, ip: &str| {
        let v = d.admin("GET", "/admin/v1/lockouts", None).json();
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["ip"] == ip)
            .unwrap_or_else(|| panic!("{ip} not listed: {v}"))
            .clone()
    };
    for round in ["before restart", "after restart"] {
        let i = item(&d, "192.0.2.40");
        assert_eq!(i["reason"], "scraping /search", "{round}: {i}");
        assert_eq!(i["source"], "operator", "{round}: {i}");
        // Without a reason the cause stands in, as before.
        let i = item(&d, "192.0.2.41");
        assert_eq!(i["reason"], "manual", "{round}: {i}");
        assert_eq!(i["source"], "operator", "{round}: {i}");
        d.restart();
    }
    // limiterctl's table and --json show both.
    let (code, out, err) = d.ctl(&["lockouts", "list"]);
    assert_eq!(code, 0, "{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("192.0.2.40 "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        row.contains("scraping /search") && row.trim_end().ends_with("operator"),
        "{out}"
    );
    let (code, out, err) = d.ctl(&["lockouts", "list", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["items"][0]["ip"], "192.0.2.40", "{v}");
    assert_eq!(v["items"][0]["reason"], "scraping /search", "{v}");
    assert_eq!(v["items"][0]["source"], "operator", "{v}");
    // The caller's 429 says who locked it out.
    let decided = d.decide("192.0.2.40");
    assert_eq!(decided["reason"], "locked", "{decided}");
    let detail = decided["problem"]["detail"].as_str().unwrap();
    assert!(detail.contains("locked out by the operator"), "{detail}");
}

#[test]
fn keys_keep_owner_and_note_apart_and_old_labels_read_as_owner() {
    let (_dir, mut d) = daemon();
    let issue = |d: &Daemon, args: &[&str]| {
        let mut a = vec!["keys", "issue"];
        a.extend_from_slice(args);
        a.push("--json");
        let (code, out, err) = d.ctl(&a);
        assert_eq!(code, 0, "{out}{err}");
        serde_json::from_str::<Value>(&out).unwrap()
    };
    let both = issue(&d, &["--owner", "acme", "--note", "nightly sync"]);
    assert_eq!(both["owner"], "acme", "{both}");
    assert_eq!(both["note"], "nightly sync", "{both}");
    let solo = issue(&d, &["--owner", "solo"]);
    assert_eq!(solo["owner"], "solo", "{solo}");
    assert!(solo["note"].is_null(), "{solo}");
    let (a, b) = (both["id"].as_str().unwrap(), solo["id"].as_str().unwrap());

    let show = |d: &Daemon, id: &str| d.admin("GET", &format!("/admin/v1/keys/{id}"), None).json();
    let listed = |d: &Daemon, id: &str| {
        let v = d.admin("GET", "/admin/v1/keys", None).json();
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["id"] == id)
            .unwrap_or_else(|| panic!("{id} not listed: {v}"))
            .clone()
    };
    for v in [show(&d, a), listed(&d, a)] {
        assert_eq!(
            (&v["owner"], &v["note"]),
            (&json!("acme"), &json!("nightly sync")),
            "{v}"
        );
    }
    let (code, out, err) = d.ctl(&["keys", "list"]);
    assert_eq!(code, 0, "{err}");
    let head: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        head,
        ["ID", "TIER", "HOURLY", "CREATED", "REVOKED", "OWNER", "NOTE"],
        "{out}"
    );
    let row = out.lines().find(|l| l.starts_with(a)).unwrap();
    assert!(
        row.contains(" acme ") && row.trim_end().ends_with("nightly sync"),
        "{out}"
    );

    // A key record from before owner and note were apart: one `label`, read as the owner.
    d.stop();
    let file = d.dir.join("state").join("keys.json");
    let mut keys: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    for k in keys["keys"].as_array_mut().unwrap() {
        if k["id"] == b {
            let k = k.as_object_mut().unwrap();
            k.remove("owner");
            k.remove("note");
            k.insert("label".into(), json!("old label"));
        }
    }
    std::fs::write(&file, serde_json::to_vec(&keys).unwrap()).unwrap();
    d.spawn();
    let v = show(&d, b);
    assert_eq!(v["owner"], "old label", "{v}");
    assert!(v["note"].is_null(), "{v}");
    let v = show(&d, a);
    assert_eq!(
        (&v["owner"], &v["note"]),
        (&json!("acme"), &json!("nightly sync")),
        "{v}"
    );
    // Revoking the old key rewrites it in the new form without losing its owner.
    assert_eq!(
        d.admin("DELETE", &format!("/admin/v1/keys/{b}"), None)
            .status,
        200
    );
    d.restart();
    assert_eq!(show(&d, b)["owner"], "old label");
}

#[test]
fn a_client_report_lists_the_anonymous_windows_with_use_and_limits() {
    let (_dir, d) = daemon();
    for _ in 0..2 {
        let v = d.decide("192.0.2.31");
        assert_eq!(v["action"], "allow", "{v}");
    }
    let c = d.admin("GET", "/admin/v1/clients/192.0.2.31", None).json();
    let windows = c["windows"].as_array().expect("windows");
    // Every window an address meters alone, in table order; the key window needs a key.
    let names: Vec<&str> = windows
        .iter()
        .map(|w| w["window"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["burst", "hourly", "daily"], "{c}");
    // Each with its own limit: the anonymous rung's burst and hourly, the anonymous daily quota.
    let limits: Vec<u64> = windows
        .iter()
        .map(|w| w["limit"].as_u64().unwrap())
        .collect();
    assert_eq!(limits, [120, 600, 1000], "the defaults: {c}");
    for w in windows {
        let keys: Vec<&str> = w.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["limit", "remaining", "resetSecs", "used", "window"],
            "{w}"
        );
        let limit = w["limit"].as_u64().unwrap();
        assert_eq!(w["used"], 2, "{w}");
        assert_eq!(w["remaining"].as_u64().unwrap(), limit - 2, "{w}");
    }
}

/// An operator lockout that would cover a trusted proxy is refused naming `ip` (it would lock
/// out every client behind the proxy), alone or inside a range; the proxy's neighbours can
/// still be locked.
#[test]
fn locking_a_trusted_proxy_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        dir.path(),
        "",
        "[identity]\ntrusted_proxies = [\"10.9.0.1\", \"2001:db8:9::1\"]\n",
    );
    for ip in [
        "10.9.0.1",
        "10.9.0.0/24",
        "::ffff:10.9.0.1",
        "2001:db8:9::/48",
        "2001:db8:9::5",
    ] {
        let r = d.admin(
            "POST",
            "/admin/v1/lockouts",
            Some(&serde_json::json!({"ip": ip, "for": "10m"})),
        );
        assert_eq!(r.status, 422, "{ip}: {}", r.body);
        assert_eq!(r.json()["field"], "ip", "{ip}: {}", r.body);
        assert!(r.body.contains("trusted proxy"), "{ip}: {}", r.body);
    }
    let r = d.admin(
        "POST",
        "/admin/v1/lockouts",
        Some(&serde_json::json!({"ip": "10.9.0.2", "for": "10m"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let items = d.admin("GET", "/admin/v1/lockouts", None).json()["items"].clone();
    assert_eq!(items.as_array().unwrap().len(), 1, "{items}");
}

/// Issue 21, P8: a lockout of `::ffff:203.0.113.0/120` answered 201 and did nothing, and
/// `::ffff:0:0/96` (all of IPv4) got past the /8 bound. A mapped address or CIDR is the IPv4
/// one it carries, on every route and in limiterctl.
#[test]
fn mapped_addresses_are_the_ipv4_addresses_they_carry() {
    let (_dir, d) = daemon();
    let r = d.admin(
        "POST",
        "/admin/v1/lockouts",
        Some(&json!({"ip": "::ffff:203.0.113.0/120", "for": "10m"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["ip"], "203.0.113.0/24", "{}", r.body);
    let v = d.decide("203.0.113.7");
    assert_eq!(
        (&v["action"], &v["reason"]),
        (&json!("reject"), &json!("locked")),
        "{v}"
    );
    for (ip, status) in [
        ("::ffff:0:0/96", 422),
        ("::ffff:0.0.0.0/100", 422),
        ("::/16", 400),
    ] {
        let r = d.admin(
            "POST",
            "/admin/v1/lockouts",
            Some(&json!({"ip": ip, "for": "10m"})),
        );
        assert_eq!(r.status, status, "{ip}: {}", r.body);
        assert_eq!(r.json()["field"], "ip", "{ip}");
    }
    let r = d.admin(
        "POST",
        "/admin/v1/lockouts",
        Some(&json!({"ip": "::ffff:192.0.2.61", "for": "10m"})),
    );
    assert_eq!(r.json()["ip"], "192.0.2.61", "{}", r.body);
    assert_eq!(d.decide("192.0.2.61")["action"], "reject");
    let r = d.admin("GET", "/admin/v1/clients/::ffff:192.0.2.61", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["ip"], "192.0.2.61");
    assert!(r.json()["lockout"].is_object(), "{}", r.body);
    let r = d.admin(
        "POST",
        "/admin/v1/explain",
        Some(&json!({"ip": "::ffff:192.0.2.61", "path": "/"})),
    );
    assert_eq!(r.json()["reason"], "locked", "{}", r.body);
    let r = d.admin("DELETE", "/admin/v1/lockouts/::ffff:192.0.2.61", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(d.decide("192.0.2.61")["action"], "allow");
    let r = d.admin(
        "POST",
        "/admin/v1/lists/deny",
        Some(&json!({"cidr": "::ffff:198.51.100.0/120", "for": "1h"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["cidr"], "198.51.100.0/24", "{}", r.body);
    let r = d.admin("DELETE", "/admin/v1/lists/deny/198.51.100.0%2F24", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let (code, out, err) = d.ctl(&["lockouts", "add", "::ffff:192.0.2.62", "--for", "1m"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("locked 192.0.2.62 until "), "{out}");
    let (code, _, err) = d.ctl(&["lockouts", "add", "::ffff:0:0/96", "--for", "1m"]);
    assert_eq!(code, 2, "{err}");
}

/// Issue 21, P8: the admin API refuses a browser's request from another origin (403, before
/// the token is looked at), serves its own page's same-origin calls, and marks every answer
/// so that its clients can tell it from any other server.
#[test]
fn the_admin_api_refuses_other_origins_and_marks_every_answer() {
    let (_dir, d) = daemon();
    let token = format!("Bearer {}", d.token());
    let marked = |r: &limiter_tests::client::Resp, what: &str| {
        assert_eq!(
            r.header("x-limiter-admin"),
            Some("v1"),
            "{what}: {:?}",
            r.headers
        );
    };
    marked(&http(d.admin, "GET", "/admin/", &[], None), "the page");
    marked(&http(d.admin, "GET", "/admin/v1/stats", &[], None), "a 401");
    let auth = ("authorization", token.as_str());
    marked(
        &http(d.admin, "GET", "/admin/v1/nope", &[auth], None),
        "a 404",
    );
    marked(
        &http(d.admin, "GET", "/admin/v1/lockouts", &[auth], None),
        "a 200",
    );
    for (extra, field) in [
        (("origin", "http://evil.example"), "Origin"),
        (("sec-fetch-site", "cross-site"), "Sec-Fetch-Site"),
        (("sec-fetch-site", "same-site"), "Sec-Fetch-Site"),
    ] {
        for headers in [vec![auth, extra], vec![extra]] {
            let r = http(
                d.admin,
                "DELETE",
                "/admin/v1/lockouts/192.0.2.1",
                &headers,
                None,
            );
            assert_eq!(r.status, 403, "{headers:?}: {}", r.body);
            assert_eq!(r.header("content-type"), Some("application/problem+json"));
            assert_eq!(r.json()["field"], field);
            marked(&r, "a 403");
        }
    }
    // What the operator page sends from its own origin.
    let own = format!("http://{}", d.admin);
    let same = [
        auth,
        ("origin", own.as_str()),
        ("sec-fetch-site", "same-origin"),
    ];
    let r = http(
        d.admin,
        "DELETE",
        "/admin/v1/lockouts/192.0.2.1",
        &same,
        None,
    );
    assert_eq!(r.status, 404, "{}", r.body);
    let r = http(d.admin, "GET", "/admin/v1/stats", &same[..1], None);
    assert_eq!(r.status, 200, "{}", r.body);
    let r = http(
        d.admin,
        "GET",
        "/admin/v1/stats",
        &[auth, ("origin", own.as_str())],
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
}

/// A server that answers every request `200 {"applied":true,"changes":[]}` as JSON, and keeps
/// what it was sent.
fn impostor() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = std::sync::Arc::clone(&seen);
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut buf = vec![0u8; 16 * 1024];
            let n = s.read(&mut buf).unwrap_or(0);
            kept.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            let body = r#"{"applied":true,"changes":[]}"#;
            let _sent = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, seen)
}

/// Issue 21, P8: `limiterctl --url http://127.0.0.1:27000 reload` against any HTTP server
/// printed "applied (0 changes)", exited 0, and sent that server the admin token. It now asks
/// without the token first and stops (exit 3) when the answer is not the admin API's; so does
/// `limiter-daemon kernel lock`, which reaches the daemon the config names.
#[test]
fn limiterctl_and_kernel_lock_send_no_token_to_a_server_that_is_not_the_admin_api() {
    const SECRET: &str = "the-admin-token-0123456789abcdef";
    let (addr, seen) = impostor();
    let out = std::process::Command::new(limiter_tests::ctl_binary())
        .args([
            "--url",
            &format!("http://{addr}"),
            "--token",
            SECRET,
            "reload",
        ])
        .env_remove("LIMITER_ADMIN_URL")
        .env_remove("LIMITER_ADMIN_TOKEN")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{err}{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.contains("not a limiter admin API"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("limiter.toml");
    std::fs::write(
        &config,
        format!(
            "[kernel]\nmode = \"off\"\n[store]\nstate_dir = \"{}\"\n[admin]\nlisten = \"{addr}\"\n",
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_limiter-daemon"))
        .args(["kernel", "--config"])
        .arg(&config)
        .arg("--pin-path")
        .arg(dir.path().join("pins"))
        .args(["lock", "192.0.2.9", "--for", "1m"])
        .env("LIMITER_ADMIN_TOKEN", SECRET)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{err}{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.contains("not a limiter admin API"), "{err}");
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty());
    for request in seen.iter() {
        assert!(!request.contains(SECRET), "the token was sent: {request}");
        assert!(
            !request.to_ascii_lowercase().contains("authorization"),
            "{request}"
        );
    }
}

/// An AS locked as its ranges (the operator page's lock on an ASN row): `"ip": "AS64500"`
/// locks every range the IP-to-ASN table gives it, as the CIDRs that cover them (a range that
/// is no prefix splits; a one-address range is an address lockout), each listed as an
/// operator's lockout whose reason names the AS; addresses inside are refused; `DELETE
/// /admin/v1/lockouts/AS64500` lifts them all and nothing else. Wrong input names `ip`: an AS
/// the table does not hold is a 404, one spanning more CIDRs than a lockout may write a 422,
/// one holding a trusted proxy a 422, and none of those locks anything.
#[test]
fn an_as_is_locked_and_lifted_as_its_ranges_and_wrong_ones_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let asn = dir.path().join("asn.tsv");
    let mut table = String::from(
        "198.51.100.0\t198.51.100.255\t64500\tZZ\tA\n\
         203.0.113.0\t203.0.113.2\t64500\tZZ\tA\n\
         203.0.113.9\t203.0.113.9\t64500\tZZ\tA\n\
         192.0.2.0\t192.0.2.255\t64501\tZZ\tB\n\
         10.9.0.0\t10.9.0.255\t64502\tZZ\tPROXY\n",
    );
    // AS64503: 300 separate /32s, more than one lockout may write.
    for i in 0..300u32 {
        let ip = std::net::Ipv4Addr::from(0x0a14_0000 + 2 * i);
        table.push_str(&format!("{ip}\t{ip}\t64503\tZZ\tWIDE\n"));
    }
    std::fs::write(&asn, table).unwrap();
    let d = Daemon::start(
        dir.path(),
        "",
        &format!(
            "[identity]\ntrusted_proxies = [\"10.9.0.1\"]\n[networks]\nasn_table = {:?}\n",
            asn.display().to_string()
        ),
    );
    // A lockout of the neighbouring AS stays through the lift.
    let r = d.admin(
        "POST",
        "/admin/v1/lockouts",
        Some(&json!({"ip": "192.0.2.0/24", "for": "1h", "reason": "other"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let r = d.admin(
        "POST",
        "/admin/v1/lockouts",
        Some(&json!({"ip": "as64500", "for": "10m", "reason": "storm"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let made = r.json();
    assert_eq!(made["ip"], "AS64500", "{made}");
    assert_eq!(
        made["cidrs"],
        json!([
            "198.51.100.0/24",
            "203.0.113.0/31",
            "203.0.113.2",
            "203.0.113.9"
        ]),
        "{made}"
    );
    assert!(
        (500..=600).contains(&made["remainingSecs"].as_u64().unwrap()),
        "{made}"
    );
    let items = d.admin("GET", "/admin/v1/lockouts", None).json()["items"].clone();
    let listed: Vec<(&str, &str, &str)> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["ip"].as_str().unwrap(),
                i["reason"].as_str().unwrap(),
                i["source"].as_str().unwrap(),
            )
        })
        .collect();
    for cidr in [
        "198.51.100.0/24",
        "203.0.113.0/31",
        "203.0.113.2",
        "203.0.113.9",
    ] {
        assert!(
            listed.contains(&(cidr, "AS64500: storm", "operator")),
            "{cidr} in {listed:?}"
        );
    }
    for ip in ["198.51.100.77", "203.0.113.1", "203.0.113.9"] {
        assert_eq!(d.decide(ip)["reason"], "locked", "{ip}");
    }
    assert_eq!(
        d.decide("203.0.113.5")["action"],
        "allow",
        "outside the AS's ranges"
    );

    let r = d.admin("DELETE", "/admin/v1/lockouts/AS64500", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["ranges"], 4, "{}", r.body);
    let items = d.admin("GET", "/admin/v1/lockouts", None).json()["items"].clone();
    assert_eq!(
        items
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["ip"].clone())
            .collect::<Vec<_>>(),
        [json!("192.0.2.0/24")],
        "only the other AS's lockout stays: {items}"
    );
    let r = d.admin("DELETE", "/admin/v1/lockouts/AS64500", None);
    assert_eq!((r.status, r.json()["field"].clone()), (404, json!("ip")));

    for (ip, status, says) in [
        ("AS64999", 404, "not in the IP-to-ASN table"),
        ("AS64503", 422, "spans 300 CIDRs"),
        ("AS64502", 422, "trusted proxy"),
    ] {
        let r = d.admin(
            "POST",
            "/admin/v1/lockouts",
            Some(&json!({"ip": ip, "for": "10m"})),
        );
        assert_eq!(
            (r.status, r.json()["field"].clone()),
            (status, json!("ip")),
            "{ip}: {}",
            r.body
        );
        assert!(r.body.contains(says), "{ip}: {}", r.body);
    }
    let r = d.admin(
        "POST",
        "/admin/v1/lockouts",
        Some(&json!({"ip": "AS64500", "for": "soon"})),
    );
    assert_eq!((r.status, r.json()["field"].clone()), (400, json!("for")));
    let items = d.admin("GET", "/admin/v1/lockouts", None).json()["items"].clone();
    assert_eq!(
        items.as_array().unwrap().len(),
        1,
        "nothing more locked: {items}"
    );
}

/// `limiterctl lockouts add|remove` take an AS (`AS64500`, any case) as the admin API does: the
/// ranges are locked and listed, and `remove` lifts them all. Junk exits 2 naming the argument
/// and what it may be, before anything is sent.
#[test]
fn limiterctl_locks_and_lifts_an_as_and_names_a_bad_target() {
    let dir = tempfile::tempdir().unwrap();
    let asn = dir.path().join("asn.tsv");
    std::fs::write(
        &asn,
        "198.51.100.0\t198.51.100.255\t64500\tZZ\tA\n\
         203.0.113.9\t203.0.113.9\t64500\tZZ\tA\n",
    )
    .unwrap();
    let d = Daemon::start(
        dir.path(),
        "",
        &format!("[networks]\nasn_table = {:?}\n", asn.display().to_string()),
    );
    let (code, out, err) = d.ctl(&[
        "lockouts", "add", "aS64500", "--for", "10m", "--reason", "storm",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("locked AS64500 (2 ranges: 198.51.100.0/24 203.0.113.9) until "),
        "{out}"
    );
    let (code, out, err) = d.ctl(&["lockouts", "list"]);
    assert_eq!(code, 0, "{out}{err}");
    for range in ["198.51.100.0/24 ", "203.0.113.9 "] {
        let row = out
            .lines()
            .find(|l| l.starts_with(range))
            .unwrap_or_else(|| panic!("{range} in {out}"));
        assert!(row.contains(" AS64500: storm "), "{row}");
    }
    assert_eq!(d.decide("198.51.100.7")["reason"], "locked");

    let (code, out, err) = d.ctl(&["lockouts", "remove", "AS64500"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.trim(), "lifted AS64500 (2 ranges)");
    let v = d.admin("GET", "/admin/v1/lockouts", None).json();
    assert_eq!(v["items"], json!([]), "{v}");
    // Nothing left to lift: refused by the daemon, naming the field.
    let (code, _, err) = d.ctl(&["lockouts", "remove", "as64500"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("404") && err.contains("field: ip"), "{err}");

    for (args, says) in [
        (
            &["lockouts", "add", "AS", "--for", "1m"][..],
            "not an AS number",
        ),
        (
            &["lockouts", "add", "ASN64500", "--for", "1m"],
            "not an AS number",
        ),
        (
            &["lockouts", "add", "AS99999999999", "--for", "1m"],
            "not an AS number",
        ),
        (&["lockouts", "remove", "as-1"], "not an AS number"),
        (
            &["lockouts", "add", "bogus", "--for", "1m"],
            "not an address, a CIDR or an AS number",
        ),
        (
            &["lockouts", "remove", "64500"],
            "not an address, a CIDR or an AS number",
        ),
    ] {
        let (code, _, err) = d.ctl(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        let bad = args[2];
        assert!(
            err.contains(&format!("\"{bad}\" is {says}")) && err.contains("<IP|CIDR|AS>"),
            "{args:?}: {err}"
        );
    }
}

/// Issue 35: the README's first five minutes, run twice in an hour, showed a level-2 lockout:
/// a lift keeps the address's strikes. `limiterctl lockouts remove IP --forget-strikes` lifts
/// the lockout and forgets them, so the next burst locks at level 1 again.
#[test]
fn limiterctl_forgets_strikes_so_the_next_lockout_starts_at_level_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        dir.path(),
        "",
        "[tiers.anon]\nburst = 3\n[lockout]\njitter = 0.0\n",
    );
    // Bursts `ip` until refused and answers the level of its lockout.
    let burst = |ip: &str| {
        for _ in 0..10 {
            let v = d.decide(ip);
            if v["action"] == "reject" {
                break;
            }
        }
        let v = d.admin("GET", "/admin/v1/lockouts", None).json();
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["ip"] == ip)
            .map(|i| i["level"].as_u64().unwrap())
    };
    // A lift alone: the strike stays, the next burst escalates.
    assert_eq!(burst("192.0.2.40"), Some(1));
    let (code, out, err) = d.ctl(&["lockouts", "remove", "192.0.2.40"]);
    assert_eq!((code, out.trim()), (0, "lifted 192.0.2.40"), "{err}");
    assert_eq!(burst("192.0.2.40"), Some(2));
    // With --forget-strikes: the next burst locks at level 1.
    assert_eq!(burst("192.0.2.41"), Some(1));
    let (code, out, err) = d.ctl(&["lockouts", "remove", "192.0.2.41", "--forget-strikes"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.trim(), "lifted 192.0.2.41; 1 strike forgotten");
    let v = d.admin("GET", "/admin/v1/clients/192.0.2.41", None).json();
    assert_eq!(v["strikes"], 0, "{v}");
    assert_eq!(burst("192.0.2.41"), Some(1));
    // The lockout of .40 is lifted and its two strikes forgotten, as JSON.
    let (code, out, err) = d.ctl(&[
        "lockouts",
        "remove",
        "192.0.2.40",
        "--forget-strikes",
        "--json",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v,
        json!({ "ip": "192.0.2.40", "lifted": true, "strikesForgotten": 2 })
    );
    // Nothing to lift or forget: refused by the daemon.
    let (code, _, err) = d.ctl(&["lockouts", "remove", "192.0.2.42", "--forget-strikes"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("404") && err.contains("holds no strikes"),
        "{err}"
    );
    // Strikes are kept per address: a range or an AS is refused before anything is sent.
    for target in ["198.51.100.0/24", "AS64500"] {
        let (code, _, err) = d.ctl(&["lockouts", "remove", target, "--forget-strikes"]);
        assert_eq!(code, 2, "{target}: {err}");
        assert!(err.contains("is not an address"), "{target}: {err}");
    }
    // The admin API names a bad parameter.
    for (path, field) in [
        (
            "/admin/v1/lockouts/192.0.2.40?forgetStrikes=yes",
            "forgetStrikes",
        ),
        (
            "/admin/v1/lockouts/198.51.100.0%2F24?forgetStrikes=true",
            "forgetStrikes",
        ),
        ("/admin/v1/lockouts/192.0.2.40?forget=true", "forget"),
    ] {
        let r = d.admin("DELETE", path, None);
        assert_eq!(r.status, 400, "{path}");
        assert_eq!(r.json()["field"], field, "{path}");
    }
}
