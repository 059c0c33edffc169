//! The reloader as the admin API's `POST /admin/v1/reload` calls it (through
//! [`Reloader::hook`]): `Ok` with the human list of changes and the new limits in force at
//! once, counts kept; `Err` naming the field and line for a bad file and for a change that
//! needs a restart, the old config still in force; the reload metrics follow.

use std::sync::Arc;

use http::HeaderMap;
use limiter_daemon::app::reload::{ReloadTargets, Reloader};
use limiter_daemon::clock::ManualClock;
use limiter_daemon::config::{Config, ConfigError, EnvMap};
use limiter_daemon::embedded::EmbeddedStore;
use limiter_daemon::engine::sink::NoKernel;
use limiter_daemon::engine::{Action, Engine, RequestView};
use limiter_daemon::identity::client_ip::Client;
use limiter_daemon::metrics::Metrics;

const T0: u64 = 1_795_946_430_000;

fn file(dir: &std::path::Path, burst: u32, api: &str) -> String {
    format!(
        "[kernel]\nmode = \"off\"\n[store]\nstate_dir = \"{}\"\n[tiers.anon]\nburst = {burst}\n\
         [http]\napi_listen = [\"{api}\"]\n",
        dir.join("state").display()
    )
}

#[test]
fn the_hook_applies_lists_changes_and_refuses_with_field_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limiter.toml");
    let first = file(dir.path(), 10, "127.0.0.1:8081");
    std::fs::write(&path, &first).unwrap();
    let cfg = Arc::new(Config::load(&path, &EnvMap::new()).unwrap());
    let clock = Arc::new(ManualClock::new(T0));
    let store = Arc::new(EmbeddedStore::open(&cfg.store, T0).unwrap());
    let engine = Arc::new(Engine::new(cfg, store, Arc::new(NoKernel), clock));
    let metrics = Metrics::new("limiter");
    let reloader = Arc::new(Reloader::new(
        &path,
        first.clone(),
        Vec::new(),
        None,
        ReloadTargets {
            engine: Arc::clone(&engine),
            kernel: None,
            gate: None,
            tunnels: None,
            tls: None,
            metrics: Arc::clone(&metrics),
        },
    ));
    let hook = reloader.hook();
    let headers = HeaderMap::new();
    let ask = || {
        engine.decide(&RequestView {
            client: Client::Addr("203.0.113.8".parse().unwrap()),
            method: &http::Method::GET,
            path: "/",
            headers: &headers,
        })
    };
    for _ in 0..3 {
        assert_eq!(ask().action(), Action::Allow);
    }

    std::fs::write(&path, file(dir.path(), 4, "127.0.0.1:8081")).unwrap();
    assert_eq!(hook().unwrap(), ["tiers.anon.burst: 10 -> 4"]);
    assert_eq!(engine.config().tiers.anon.burst.get(), 4);
    // Three counted before, so one more is the last.
    assert_eq!(ask().action(), Action::Allow);
    assert_eq!(ask().action(), Action::Reject);

    std::fs::write(&path, file(dir.path(), 0, "127.0.0.1:8081")).unwrap();
    match hook().unwrap_err() {
        ConfigError::InvalidAt { field, line, .. } => {
            assert_eq!((field.as_str(), line), ("tiers.anon.burst", 6));
        }
        other => panic!("{other}"),
    }
    std::fs::write(&path, file(dir.path(), 4, "127.0.0.1:9999")).unwrap();
    let err = hook().unwrap_err();
    assert!(
        matches!(&err, ConfigError::InvalidAt { field, line: 8, .. } if field == "http.api_listen"),
        "{err}"
    );
    assert!(err.to_string().contains("needs a restart"), "{err}");
    std::fs::write(&path, "[tiers.anon\n").unwrap();
    assert!(matches!(
        hook().unwrap_err(),
        ConfigError::Parse { line: Some(1), .. }
    ));
    assert_eq!(
        engine.config().tiers.anon.burst.get(),
        4,
        "a refused reload applied"
    );

    let text = metrics.render();
    assert!(
        text.contains("limiter_config_reloads_total{result=\"applied\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("limiter_config_reloads_total{result=\"refused\"} 3"),
        "{text}"
    );
}
