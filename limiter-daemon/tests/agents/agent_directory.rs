//! Agents' key directories over real HTTPS: a local server with a test CA made by `openssl`
//! here serves a directory, a redirect, an oversized body and (later) failures. The fetcher
//! refuses loopback unless allowed, refuses an untrusted certificate, never follows the
//! redirect, refuses the oversized body, and settles a signed request to verified behind the
//! request; a failing refetch keeps the keys, and `Cache-Control: max-age` decides when the
//! refetch happens (the clock is the test's). That a failure then backs off for 5 minutes is
//! the directory cache's unit test (`identity::web_bot_auth::tests`).

use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::rig::WK;
use http::HeaderMap;
use limiter_daemon::fetch::agent_directories as fetcher;
use limiter_daemon::fetch::https::{self, FetchOptions};
use limiter_daemon::identity::web_bot_auth::directory::DirectoryCache;
use limiter_daemon::identity::web_bot_auth::{
    signer, verify_request, Outcome, Refusal, RequestParts,
};
use ring::signature::Ed25519KeyPair;
use tokio_util::sync::CancellationToken;

fn sign(k: &Ed25519KeyPair, agent: &str, now_s: u64) -> HeaderMap {
    let now_s = now_s as i64;
    signer::sign(
        k,
        agent,
        "site.example",
        "\"@authority\" \"signature-agent\"",
        &signer::params(k, now_s, now_s + 300, "web-bot-auth"),
    )
}

fn parts(h: &HeaderMap) -> RequestParts<'_> {
    RequestParts {
        method: Some("GET"),
        scheme: Some("https"),
        authority: Some("site.example"),
        path_and_query: Some("/"),
        path: None,
        headers: h,
    }
}

fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_over_https_redirects_oversize_failures_and_max_age() {
    let tmp = tempfile::tempdir().unwrap();
    // `ca.pem`, and `srv.pem`/`srv.key` for 127.0.0.1 signed by it.
    limiter_tests::tls::ca(tmp.path(), "ca");
    limiter_tests::tls::leaf(
        tmp.path(),
        "ca",
        "srv",
        "localhost",
        "IP:127.0.0.1,DNS:localhost",
    );
    let served = Arc::new(crate::rig::Served::default());
    let k = Ed25519KeyPair::from_seed_unchecked(&[3; 32]).unwrap();
    *served.directory.lock().unwrap() = signer::directory_of(&k).1.into_bytes();
    let addr = crate::rig::serve(tmp.path(), Arc::clone(&served)).await;
    let base_url = format!("https://{addr}");
    let ca = tmp.path().join("ca.pem");
    let opts = |allow: bool, ca: Option<&Path>| {
        let allow = if allow {
            vec!["127.0.0.0/8".parse().unwrap()]
        } else {
            vec![]
        };
        FetchOptions::new(
            Duration::from_secs(5),
            fetcher::MAX_DIRECTORY_BYTES,
            allow,
            fetcher::MEDIA_TYPE,
            ca,
        )
        .unwrap()
    };
    let good = opts(true, Some(&ca));
    let url = format!("{base_url}{WK}");

    let e = https::get(&url, &opts(false, Some(&ca))).await.unwrap_err();
    assert!(
        e.contains("not allowed"),
        "loopback refused by default: {e}"
    );
    let e = https::get(&url, &opts(true, None)).await.unwrap_err();
    assert!(
        e.contains("TLS"),
        "an untrusted certificate is refused: {e}"
    );
    let e = https::get(&format!("http://{addr}{WK}"), &good)
        .await
        .unwrap_err();
    assert!(e.contains("https"), "{e}");
    let e = https::get(&format!("{base_url}/redirect"), &good)
        .await
        .unwrap_err();
    assert_eq!(e, "status 302");
    let e = https::get(&format!("{base_url}/big"), &good)
        .await
        .unwrap_err();
    assert!(e.contains("over"), "oversize refused: {e}");
    assert!(
        !served.hits.lock().unwrap().iter().any(|p| p == WK),
        "the redirect was not followed"
    );

    // Behind the request: unverified first, verified once the fetcher lands the directory.
    let clock = Arc::new(AtomicU64::new(1_800_000_000_000));
    let cache = Arc::new(DirectoryCache::new());
    let stop = CancellationToken::new();
    let c = Arc::clone(&clock);
    tokio::spawn(fetcher::run(
        Arc::clone(&cache),
        good.clone(),
        move || c.load(Ordering::SeqCst),
        stop.clone(),
    ));
    let agent = base_url.clone();
    let now = || clock.load(Ordering::SeqCst);
    let ip: IpAddr = "203.0.113.7".parse().unwrap();
    let h = sign(&k, &agent, now() / 1000);
    assert_eq!(
        verify_request(&parts(&h), &cache, ip, now()),
        Outcome::Unverified
    );
    let cache2 = Arc::clone(&cache);
    tokio::task::spawn_blocking(move || {
        until("the directory", || {
            cache2.summary().first().is_some_and(|s| s.1 == 1)
        })
    })
    .await
    .unwrap();
    let dir_url = format!("{base_url}{WK}");
    assert_eq!(
        verify_request(&parts(&h), &cache, ip, now()),
        Outcome::Verified {
            directory: dir_url.clone()
        }
    );
    let fetches = || served.directory_fetches();
    assert_eq!(fetches(), 1);

    // max-age=600: no refetch at +599 s; at +600 s one, which fails (500) and keeps the keys.
    served.fail.store(500, Ordering::SeqCst);
    clock.fetch_add(599_000, Ordering::SeqCst);
    let h = sign(&k, &agent, now() / 1000);
    assert!(matches!(
        verify_request(&parts(&h), &cache, ip, now()),
        Outcome::Verified { .. }
    ));
    clock.fetch_add(1_000, Ordering::SeqCst);
    assert!(matches!(
        verify_request(&parts(&h), &cache, ip, now()),
        Outcome::Verified { .. }
    ));
    let cache2 = Arc::clone(&cache);
    tokio::task::spawn_blocking(move || {
        until("the failed refetch", || cache2.summary()[0].2.is_some())
    })
    .await
    .unwrap();
    assert_eq!(fetches(), 2);
    assert!(cache.summary()[0].2.as_deref().unwrap().contains("500"));
    assert!(
        matches!(
            verify_request(&parts(&h), &cache, ip, now()),
            Outcome::Verified { .. }
        ),
        "keys kept"
    );
    // A key from another directory is invalid.
    let other = Ed25519KeyPair::from_seed_unchecked(&[4; 32]).unwrap();
    let h = sign(&other, &agent, now() / 1000);
    assert_eq!(
        verify_request(&parts(&h), &cache, "198.51.100.9".parse().unwrap(), now()),
        Outcome::Invalid(Refusal::UnknownKey)
    );
    stop.cancel();
}
