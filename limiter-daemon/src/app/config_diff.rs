//! What a reload would change: the fields that cannot change while the daemon runs (listeners,
//! the store, the kernel attachment, the runtime's shape) and the human list of what does.
//!
//! Restart-only fields are compared on the validated values (so `"127.0.0.1:8081"` and a
//! default that says the same are one address); the change list is read from the files as
//! written, one line per dotted field (`tiers.anon.burst: 120 -> 60`), secrets shown only as
//! "changed".

use std::collections::BTreeMap;

use crate::config::log::LogFormat;
use crate::config::Config;

/// A field a reload refuses to change: its dotted name and its values, old and new.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartOnly {
    pub field: &'static str,
    pub old: String,
    pub new: String,
}

/// The first field that differs between `old` and `new` and needs a restart. `log_flag`: the
/// `--log-format` given at start, which wins over the file (its `[log] format` is then moot).
pub fn restart_only(
    old: &Config,
    new: &Config,
    log_flag: Option<LogFormat>,
) -> Option<RestartOnly> {
    macro_rules! same {
        ($field:literal, $($path:tt)+) => {
            let (o, n) = (
                plain(&format!("{:?}", old.$($path)+)),
                plain(&format!("{:?}", new.$($path)+)),
            );
            if o != n {
                return Some(RestartOnly { field: $field, old: o, new: n });
            }
        };
    }
    // Listeners: bound once, before privileges and sockets are handed out.
    same!("http.proxy_listen", http.proxy_listen);
    same!("http.api_listen", http.api_listen);
    same!("http.grpc_listen", http.grpc.listen);
    same!("http.grpc_route_key", http.grpc.route_key);
    same!("metrics.listen", metrics.listen);
    same!("admin.listen", admin.listen);
    // The admin token is read once at start (a generated one is written then).
    same!("admin.token_file", admin.token_file);
    // The store: counters, strikes and lockouts live in it; a new one would start empty.
    same!("store.backend", store.backend);
    same!("store.state_dir", store.state_dir);
    same!("store.valkey_address", store.valkey_address);
    same!("store.key_prefix", store.key_prefix);
    same!("store.hash", store.hash);
    if old.store.hash_secret != new.store.hash_secret {
        // Every identity would hash anew: counts and lockouts would be lost.
        return Some(RestartOnly {
            field: "store.hash_secret",
            old: "<redacted>".into(),
            new: "<redacted, changed>".into(),
        });
    }
    same!("store.max_identities", store.max_identities);
    // The kernel attachment (its config, ceilings and ports, is rewritten live).
    same!("kernel.mode", kernel.mode);
    same!("kernel.attach", kernel.attach);
    same!("kernel.interfaces", kernel.interfaces);
    same!("kernel.pin_path", kernel.pin_path);
    same!("metrics.namespace", metrics.namespace);
    // Built once per proxy thread or listener at start.
    same!("http.upstream", http.upstream);
    same!("http.connect_timeout", http.connect_timeout);
    same!("http.response_timeout", http.response_timeout);
    same!("http.pool_idle_timeout", http.pool_idle_timeout);
    same!("http.pool_max_idle", http.pool_max_idle);
    same!(
        "http.upstream_max_connections",
        http.upstream_max_connections
    );
    same!("http.max_header_count", http.max_header_count);
    same!("http.max_header_bytes", http.max_header_bytes);
    same!("http.api_max_body", http.api_max_body);
    same!("http.header_read_timeout", http.header_read_timeout);
    same!("http.body_read_timeout", http.body_read_timeout);
    same!("http.api_max_connections", http.api_max_connections);
    same!("http.max_connections", http.max_connections);
    same!(
        "http.max_connections_per_client",
        http.max_connections_per_client
    );
    same!("http.trusted_peers", http.trusted_peers);
    same!("http.problem_type_base", http.problem_type_base);
    same!("http.shutdown_grace", http.shutdown_grace);
    same!("http.worker_threads", http.worker_threads);
    // Read when a proxy thread builds its server (`http::proxy::h2`): a restart applies them.
    same!("http.http2", http.h2.enabled);
    same!(
        "http.h2_max_concurrent_streams",
        http.h2.max_concurrent_streams
    );
    same!("http.h2_keep_alive_interval", http.h2.keep_alive_interval);
    same!("http.h2_keep_alive_timeout", http.h2.keep_alive_timeout);
    same!("http.self_service_path", http.self_service_path);
    if old.http.api_token != new.http.api_token {
        return Some(RestartOnly {
            field: "http.api_token_file",
            old: "<redacted>".into(),
            new: "<redacted, changed>".into(),
        });
    }
    // The key cache is sized and timed when the engine is built.
    same!("keys.cache_ttl", keys.cache_ttl);
    same!("keys.negative_ttl", keys.negative_ttl);
    same!("keys.cache_capacity", keys.cache_capacity);
    if log_flag.is_none() {
        same!("log.format", log.format);
    }
    // The access log's writer is started with the listeners (SIGUSR1 reopens its file).
    same!("log.access", log.access);
    same!("log.access_format", log.access_format);
    None
}

/// A value's debug text as an operator reads it: `Some(x)` is `x` and `None` is `(unset)`,
/// wherever they stand (`[Some(1), None]`), so no Rust syntax reaches a log line or a reload
/// refusal.
fn plain(debug: &str) -> String {
    let mut out = String::with_capacity(debug.len());
    // Closing parentheses of the `Some(` wrappers opened, by depth.
    let mut wrappers: Vec<usize> = Vec::new();
    let mut depth = 0usize;
    let mut rest = debug;
    while let Some(c) = rest.chars().next() {
        let word_start = !out.ends_with(|p: char| p.is_alphanumeric() || p == '_');
        if word_start && rest.starts_with("Some(") {
            depth += 1;
            wrappers.push(depth);
            rest = &rest["Some(".len()..];
            continue;
        }
        if word_start
            && rest.starts_with("None")
            && !rest["None".len()..].starts_with(|p: char| p.is_alphanumeric() || p == '_')
        {
            out.push_str("(unset)");
            rest = &rest["None".len()..];
            continue;
        }
        match c {
            '(' => depth += 1,
            ')' => {
                if wrappers.last() == Some(&depth) {
                    wrappers.pop();
                    depth -= 1;
                    rest = &rest[1..];
                    continue;
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Whether a dotted field holds a secret: its values are never shown.
fn secret(field: &str) -> bool {
    let last = field.rsplit('.').next().unwrap_or(field);
    ["secret", "token", "password", "private"]
        .iter()
        .any(|s| last.contains(s))
}

fn flatten(prefix: &str, v: &toml::Value, out: &mut BTreeMap<String, String>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let name = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&name, v, out);
            }
        }
        toml::Value::Array(a) if a.iter().all(toml::Value::is_table) && !a.is_empty() => {
            for (i, v) in a.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), v, out);
            }
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

fn fields(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Ok(v) = text.parse::<toml::Table>() {
        flatten("", &toml::Value::Table(v), &mut out);
    }
    out
}

/// One line per field written differently in `new_text` than in `old_text`, in field order:
/// `field: old -> new`, `(unset)` for a field absent from one of them.
pub fn changes(old_text: &str, new_text: &str) -> Vec<String> {
    let (old, new) = (fields(old_text), fields(new_text));
    let unset = "(unset)".to_string();
    let mut names: Vec<&String> = old.keys().chain(new.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|name| {
            let (o, n) = (old.get(name), new.get(name));
            if o == n {
                return None;
            }
            if secret(name) {
                return Some(format!("{name}: changed"));
            }
            Some(format!(
                "{name}: {} -> {}",
                o.unwrap_or(&unset),
                n.unwrap_or(&unset)
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EnvMap;

    fn cfg(text: &str) -> Config {
        Config::from_toml_str(text, "t.toml".as_ref(), &EnvMap::new()).unwrap()
    }

    #[test]
    fn values_read_without_rust_syntax() {
        assert_eq!(
            plain("Some(\"/etc/limiter/token\")"),
            "\"/etc/limiter/token\""
        );
        assert_eq!(plain("None"), "(unset)");
        assert_eq!(
            plain("[Some(1), None, Some((2, 3))]"),
            "[1, (unset), (2, 3)]"
        );
        assert_eq!(plain("Some(Some(4))"), "4");
        assert_eq!(
            plain("Foo(NoneSuch, MySome(1))"),
            "Foo(NoneSuch, MySome(1))"
        );
        assert_eq!(plain("[127.0.0.1:8080]"), "[127.0.0.1:8080]");
        assert_eq!(plain("30s"), "30s");
    }

    #[test]
    fn a_restart_only_change_of_an_optional_field_names_its_values_plainly() {
        let old = cfg("[admin]\ntoken_file = \"/etc/limiter/admin-token\"\n");
        let new = cfg("");
        let r = restart_only(&old, &new, None).unwrap();
        assert_eq!(r.field, "admin.token_file");
        assert_eq!(r.old, "\"/etc/limiter/admin-token\"");
        assert_eq!(r.new, "(unset)");
    }

    #[test]
    fn changes_name_fields_and_hide_secrets() {
        let old =
            "[tiers.anon]\nburst = 120\n[jwt]\nsecret = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\n";
        let new = "[tiers.anon]\nburst = 60\nhourly = 500\n[jwt]\nsecret = \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"\n[[routes]]\nprefix = \"/a\"\n";
        let c = changes(old, new);
        assert!(
            c.contains(&"tiers.anon.burst: 120 -> 60".to_string()),
            "{c:?}"
        );
        assert!(
            c.contains(&"tiers.anon.hourly: (unset) -> 500".to_string()),
            "{c:?}"
        );
        assert!(c.contains(&"jwt.secret: changed".to_string()), "{c:?}");
        assert!(c.iter().any(|l| l.starts_with("routes[0].prefix")), "{c:?}");
        assert!(!c.iter().any(|l| l.contains("aaaa") || l.contains("bbbb")));
        assert!(changes(old, old).is_empty());
    }

    #[test]
    fn listeners_and_store_need_a_restart_limits_do_not() {
        let base = cfg("[http]\napi_listen = [\"127.0.0.1:8081\"]\n");
        let limits = cfg(
            "[http]\napi_listen = [\"127.0.0.1:8081\"]\nmax_held = 50\n[tiers.anon]\nburst = 3\n",
        );
        assert_eq!(restart_only(&base, &limits, None), None);
        let moved = cfg("[http]\napi_listen = [\"127.0.0.1:8082\"]\n");
        assert_eq!(
            restart_only(&base, &moved, None).unwrap().field,
            "http.api_listen"
        );
        let metrics = cfg("[http]\napi_listen = [\"127.0.0.1:8081\"]\n[metrics]\nlisten = \"\"\n");
        assert_eq!(
            restart_only(&base, &metrics, None).unwrap().field,
            "metrics.listen"
        );
        let store = cfg(
            "[http]\napi_listen = [\"127.0.0.1:8081\"]\n[store]\nbackend = \"valkey\"\nvalkey_address = \"127.0.0.1:6379\"\n",
        );
        assert_eq!(
            restart_only(&base, &store, None).unwrap().field,
            "store.backend"
        );
        let json = cfg("[http]\napi_listen = [\"127.0.0.1:8081\"]\n[log]\nformat = \"json\"\n");
        assert_eq!(
            restart_only(&base, &json, None).unwrap().field,
            "log.format"
        );
        assert_eq!(restart_only(&base, &json, Some(LogFormat::Text)), None);
        let access = cfg(
            "[http]\napi_listen = [\"127.0.0.1:8081\"]\n[log]\naccess = \"/var/log/limiter/a.log\"\n",
        );
        let refused = restart_only(&base, &access, None).unwrap();
        assert_eq!(refused.field, "log.access");
        assert_eq!(
            (refused.old.as_str(), refused.new.as_str()),
            ("\"\"", "\"/var/log/limiter/a.log\"")
        );
    }
}
