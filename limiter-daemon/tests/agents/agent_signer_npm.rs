//! A signer nobody here wrote: Cloudflare's `web-bot-auth` npm package (0.1.3, installed by
//! this test into its own directory under the target dir) signs requests with a fresh Ed25519
//! key, in both `Signature-Agent` forms (dictionary and bare string); our verifier verifies
//! them against the agent's directory, and refuses the same signature for another host.

use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use limiter_daemon::identity::web_bot_auth::directory::{DirectoryCache, Fetched};
use limiter_daemon::identity::web_bot_auth::{
    directory_url, verify_request, Outcome, Refusal, RequestParts,
};

#[test]
fn cloudflares_signer_is_verified_and_a_replay_to_another_host_is_not() {
    let dir = crate::rig::npm_dir();
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let ip: IpAddr = "203.0.113.20".parse().unwrap();
    let agent_url = "https://agent.example";
    let directory = directory_url(agent_url).unwrap();
    for form in [format!("sig1=\"{agent_url}\""), format!("\"{agent_url}\"")] {
        let signed = crate::rig::npm_sign(&dir, "https://site.example/path?q=1", &form);
        let mut h = HeaderMap::new();
        for (name, field) in [
            ("signature", "signature"),
            ("signature-input", "input"),
            ("signature-agent", "agent"),
        ] {
            h.insert(name, signed[field].as_str().unwrap().parse().unwrap());
        }
        let cache = DirectoryCache::new();
        let body = format!(
            r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","x":"{}"}}]}}"#,
            signed["x"].as_str().unwrap()
        );
        cache
            .landed(
                &directory,
                ip,
                Ok(Fetched {
                    body: body.into_bytes(),
                    max_age_s: None,
                }),
                now_ms,
            )
            .unwrap();
        let parts = |authority| RequestParts {
            method: Some("GET"),
            scheme: Some("https"),
            authority: Some(authority),
            path_and_query: Some("/path?q=1"),
            path: None,
            headers: &h,
        };
        assert_eq!(
            verify_request(&parts("site.example"), &cache, ip, now_ms),
            Outcome::Verified {
                directory: directory.clone()
            },
            "{form}"
        );
        assert_eq!(
            verify_request(
                &parts("other.example"),
                &cache,
                "198.51.100.20".parse().unwrap(),
                now_ms
            ),
            Outcome::Invalid(Refusal::Signature),
            "{form}"
        );
    }
}
