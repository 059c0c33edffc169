//! The engine's operator events as JSON log lines, captured with the same subscriber
//! `--log-format json` installs: a key issued and revoked, a lockout made by hand and lifted.
//! Every line parses; each event is there once; the key's secret (and the whole key) is in no
//! line. (The admin API that issues keys from outside calls exactly these operations.)

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use limiter_daemon::clock::ManualClock;
use limiter_daemon::config::Config;
use limiter_daemon::embedded::EmbeddedStore;
use limiter_daemon::engine::keys::IssueKey;
use limiter_daemon::engine::sink::NoKernel;
use limiter_daemon::engine::Engine;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn key_and_lockout_events_are_json_lines_without_the_secret() {
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_writer(move || writer.clone())
        .finish();
    let dir = tempfile::tempdir().unwrap();
    let cfg = Arc::new(Config::with_state_dir(dir.path()));
    let clock = Arc::new(ManualClock::new(1_795_946_430_000));
    let token = tracing::subscriber::with_default(subscriber, || {
        let store = Arc::new(EmbeddedStore::open(&cfg.store, 1_795_946_430_000).unwrap());
        let engine = Engine::new(Arc::clone(&cfg), store, Arc::new(NoKernel), clock);
        let issued = engine
            .keys()
            .issue(IssueKey {
                hourly_limit: None,
                tier: None,
                owner: Some("ci".into()),
                note: None,
            })
            .unwrap();
        assert!(engine.keys().revoke(&issued.record.id).unwrap());
        let ip = "203.0.113.40".parse().unwrap();
        engine.lockouts().lock(ip, Duration::from_secs(60)).unwrap();
        assert!(engine.lockouts().lift(ip).unwrap().is_some());
        issued.token
    });
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    // The secret is everything after the second `_`: base64url may hold `_` itself.
    let secret = token.splitn(3, '_').nth(2).unwrap();
    assert!(secret.len() >= 20);
    let mut events = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            !line.contains(secret),
            "the key's secret in a log line: {line}"
        );
        if let Some(e) = v["fields"]["event"].as_str() {
            events.push(e.to_string());
        }
    }
    assert_eq!(
        events,
        [
            "key_issued",
            "key_revoked",
            "lockout_made",
            "lockout_lifted"
        ],
        "{text}"
    );
}
