//! What the front-end tests share: the real engine (embedded store, manual clock) behind the
//! daemon's API, and requests from a chosen loopback address, so two clients of one front end
//! are two addresses.

#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use limiter_daemon::clock::ManualClock;
use limiter_daemon::config::{Config, EnvMap};
use limiter_tests::client::{try_http_from, Resp};

use crate::http_support::{manual_engine, settings, start, Running};

/// 2026-11-29T10:00:30Z.
pub const T0: u64 = 1_795_946_430_000;

/// Anonymous burst 3 a minute; `/free` is never metered (a route rule the front end's
/// original-path field must select).
pub const CONFIG: &str = r#"
[tiers.anon]
burst = 3
hourly = 100
[[routes]]
prefix = "/free"
limits = []
"#;

pub struct World {
    pub d: Running,
    _state: tempfile::TempDir,
    _clock: ManualClock,
}

/// The daemon's API with the real engine; only 127.0.0.1 (the front end) is a trusted peer,
/// so 127.0.0.2 and 127.0.0.3 are clients.
pub async fn world(http_extra: &str) -> World {
    world_with("", None, http_extra).await
}

/// [`world`] with `config_extra` after [`CONFIG`] and the proxy forwarding to `upstream`.
pub async fn world_with(
    config_extra: &str,
    upstream: Option<SocketAddr>,
    http_extra: &str,
) -> World {
    let state = tempfile::tempdir().unwrap();
    let text = format!(
        "{CONFIG}\n{config_extra}\n[store]\nstate_dir = \"{}\"\n",
        state.path().display()
    );
    let cfg = Config::from_toml_str(&text, Path::new("test.toml"), &EnvMap::new()).unwrap();
    let clock = ManualClock::new(T0);
    let engine = manual_engine(cfg, &clock, T0);
    let extra = format!("trusted_peers = [\"127.0.0.1/32\"]\n{http_extra}");
    let mut http = settings(upstream, &extra);
    // As the whole file does: PROXY headers are believed from `[identity] trusted_proxies`.
    http.proxy_protocol_peers = engine.config().identity.trusted_proxies.clone();
    let d = start(http, engine).await;
    World {
        d,
        _state: state,
        _clock: clock,
    }
}

/// One request from `from` to `to` over a fresh connection (`Connection: close`), read to the
/// end, on a blocking thread (the daemon under test may share this runtime).
pub async fn request(
    from: IpAddr,
    to: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> Resp {
    let mut owned: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        owned.push(("host".into(), "app.test".into()));
    }
    let (method, target) = (method.to_string(), target.to_string());
    tokio::task::spawn_blocking(move || {
        let headers: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (&**k, &**v)).collect();
        try_http_from(Some(from), to, &method, &target, &headers, None)
            .unwrap_or_else(|| panic!("{method} {target} on {to}: no answer"))
    })
    .await
    .unwrap()
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}
