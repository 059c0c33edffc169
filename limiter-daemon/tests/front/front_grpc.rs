//! Envoy's gRPC services on `[http] grpc_listen`, driven by a tonic client generated from the
//! same protos (`envoy-types`) against the real daemon binary, differentially: for a burst, a
//! key holder (API key) and a delay route, ext_authz `Check` and `ShouldRateLimit` give the
//! decisions `/v1/decide` gives for the same case (admit, refuse or delay; remaining; retry
//! after), each surface on its own clients so their counts do not mix. Also: `hits_addend`
//! counts as a route's `cost` does, `Check` walks a trusted proxy's `X-Forwarded-For`, a bad
//! call is `INVALID_ARGUMENT` naming the field, and with `api_token_file` set a call needs
//! the token in its metadata. Silent and half-preface connections are closed after
//! `header_read_timeout`, and past `api_max_connections` at once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::address::Address;
use envoy_types::pb::envoy::config::core::v3::{Address as EnvoyAddress, SocketAddress};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Peer, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use limiter_tests::client::ratelimit_field;
use limiter_tests::client::request;
use limiter_tests::daemon::config_text;
use limiter_tests::daemon::Daemon;
use limiter_tests::eventually;
use limiter_tests::free_addr;
use tonic::transport::Channel;

/// Anonymous burst 3 a minute on `/page` (burst and hourly only); `/heavy` costs 5 units;
/// `/scan` is metered by a daily quota of 2 with a 300 ms scan delay past it; a key holder
/// (sponsor) has a burst of 4.
const LIMITS: &str = r#"
[tiers.anon]
burst = 3
hourly = 100
[tiers.sponsor]
burst = 4
[quota]
anon = 2
soft_delay_ms = 300
[default_route]
limits = ["burst", "hourly"]
[[routes]]
prefix = "/heavy"
cost = 5
limits = ["burst", "hourly"]
[[routes]]
prefix = "/scan"
limits = ["daily"]
over_quota = "delay"
[identity]
trusted_proxies = ["127.0.0.1/32"]
[metrics]
listen = ""
"#;

/// What a surface said about one request, in the terms every surface can state.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Said {
    /// `allow`, `delay` (held, or `delayMs` > 0) or `reject`.
    action: &'static str,
    tier: String,
    remaining: String,
    retry_after: Option<u64>,
    /// The `RateLimit` field: (window, remaining, reset).
    windows: Vec<(String, u64)>,
}

fn said(action: &'static str, h: &HashMap<String, String>, retry: Option<u64>) -> Said {
    let get = |k: &str| h.get(k).cloned().unwrap_or_default();
    Said {
        action,
        tier: get("x-ratelimit-tier"),
        remaining: get("x-ratelimit-remaining"),
        retry_after: retry,
        windows: ratelimit_field(&get("ratelimit"))
            .into_iter()
            .map(|(n, r, _)| (n, r))
            .collect(),
    }
}

/// Retry-After may tick over between two surfaces' calls: equal within a second.
fn same(a: &[Said], b: &[Said], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let close = match (x.retry_after, y.retry_after) {
            (Some(p), Some(q)) => p.abs_diff(q) <= 1,
            (p, q) => p == q,
        };
        let mut y2 = y.clone();
        y2.retry_after = x.retry_after;
        assert!(
            close && *x == y2,
            "{what}, request {i}:\n  decide {x:?}\n  grpc   {y:?}"
        );
    }
}

/// Mode 0600, as the daemon asks of a token file.
fn private(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

struct World {
    _dir: tempfile::TempDir,
    _d: Daemon,
    api: SocketAddr,
    grpc: SocketAddr,
    admin: SocketAddr,
    admin_token: String,
}

fn start(http_extra: &str) -> World {
    let dir = tempfile::tempdir().unwrap();
    let (api, grpc, admin) = (free_addr(), free_addr(), free_addr());
    let admin_token = "admin-token-0123456789abcdef".to_string();
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, &admin_token).unwrap();
    private(&token_file);
    let text = config_text(
        dir.path(),
        &format!(
            "{LIMITS}[admin]\nlisten = \"{admin}\"\ntoken_file = \"{}\"\n\
             [http]\napi_listen = [\"{api}\"]\ngrpc_listen = [\"{grpc}\"]\n{http_extra}",
            token_file.display()
        ),
    );
    let mut d = Daemon::run(dir.path(), &text, &[], api);
    d.wait_listening(grpc);
    World {
        _dir: dir,
        _d: d,
        api,
        grpc,
        admin,
        admin_token,
    }
}

fn decide(w: &World, ip: &str, path: &str, headers: &[(&str, &str)]) -> Said {
    let h: serde_json::Map<String, serde_json::Value> = headers
        .iter()
        .map(|(k, v)| ((*k).to_string(), serde_json::Value::from(*v)))
        .collect();
    let body = serde_json::json!({"ip": ip, "method": "GET", "path": path, "headers": h});
    let r = request(w.api, "POST", "/v1/decide", &[], &body.to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let h: HashMap<String, String> = v["headers"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    let action = match v["action"].as_str().unwrap() {
        "allow" => "allow",
        "delay" => "delay",
        "reject" => "reject",
        other => panic!("action {other}"),
    };
    said(action, &h, v["retryAfter"].as_u64())
}

fn check_request(source: &str, path: &str, headers: &[(&str, &str)]) -> CheckRequest {
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(Peer {
                address: Some(EnvoyAddress {
                    address: Some(Address::SocketAddress(SocketAddress {
                        address: source.into(),
                        ..Default::default()
                    })),
                }),
                ..Default::default()
            }),
            request: Some(Request {
                http: Some(HttpRequest {
                    method: "GET".into(),
                    path: path.into(),
                    headers: headers
                        .iter()
                        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                        .chain([(":path".to_string(), path.to_string())])
                        .collect(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

fn held(started: Instant) -> bool {
    started.elapsed() >= Duration::from_millis(280)
}

async fn check(c: &mut AuthorizationClient<Channel>, req: CheckRequest) -> Said {
    let started = Instant::now();
    let r = c.check(req).await.expect("Check answers").into_inner();
    match r.http_response.expect("an http_response") {
        HttpResponse::OkResponse(ok) => {
            assert_eq!(r.status.unwrap().code, 0);
            let h = ok
                .response_headers_to_add
                .into_iter()
                .map(|o| o.header.unwrap())
                .map(|h| (h.key, h.value))
                .collect();
            said(if held(started) { "delay" } else { "allow" }, &h, None)
        }
        HttpResponse::DeniedResponse(no) => {
            assert_eq!(no.status.unwrap().code, 429);
            assert_eq!(
                r.status.unwrap().code,
                tonic::Code::ResourceExhausted as i32
            );
            let h: HashMap<String, String> = no
                .headers
                .into_iter()
                .map(|o| o.header.unwrap())
                .map(|h| (h.key, h.value))
                .collect();
            assert_eq!(h["content-type"], "application/problem+json");
            let p: serde_json::Value = serde_json::from_str(&no.body).unwrap();
            assert_eq!(p["status"], 429);
            let retry = h["retry-after"].parse().unwrap();
            assert_eq!(p["retryAfter"].as_u64(), Some(retry));
            said("reject", &h, Some(retry))
        }
        other => panic!("{other:?}"),
    }
}

fn entries(pairs: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: pairs
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..Default::default()
    }
}

fn rl_request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "app".into(),
        descriptors,
        hits_addend: 0,
    }
}

async fn should(c: &mut RateLimitServiceClient<Channel>, req: RateLimitRequest) -> Said {
    let n = req.descriptors.len();
    let started = Instant::now();
    let r = c
        .should_rate_limit(req)
        .await
        .expect("ShouldRateLimit answers")
        .into_inner();
    assert_eq!(r.statuses.len(), n, "one status per descriptor");
    let h: HashMap<String, String> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    let s = &r.statuses[0];
    let over = r.overall_code == Code::OverLimit as i32;
    assert_eq!(s.code, r.overall_code);
    if let Some(limit) = &s.current_limit {
        assert_eq!(limit.requests_per_unit.to_string(), h["x-ratelimit-limit"]);
    }
    if over {
        let retry: u64 = h["retry-after"].parse().unwrap();
        assert_eq!(s.limit_remaining, 0);
        assert_eq!(s.duration_until_reset.unwrap().seconds, retry as i64);
        assert_eq!(h["content-type"], "application/problem+json");
        let p: serde_json::Value = serde_json::from_slice(&r.raw_body).unwrap();
        assert_eq!(p["retryAfter"].as_u64(), Some(retry));
        return said("reject", &h, Some(retry));
    }
    assert_eq!(r.overall_code, Code::Ok as i32);
    if s.current_limit.is_some() {
        assert_eq!(s.limit_remaining.to_string(), h["x-ratelimit-remaining"]);
    }
    said(if held(started) { "delay" } else { "allow" }, &h, None)
}

async fn clients(
    w: &World,
) -> (
    AuthorizationClient<Channel>,
    RateLimitServiceClient<Channel>,
) {
    let url = format!("http://{}", w.grpc);
    (
        AuthorizationClient::connect(url.clone()).await.unwrap(),
        RateLimitServiceClient::connect(url).await.unwrap(),
    )
}

fn issue_key(w: &World) -> String {
    let bearer = format!("Bearer {}", w.admin_token);
    let r = request(
        w.admin,
        "POST",
        "/admin/v1/keys",
        &[("authorization", &bearer)],
        r#"{"owner":"grpc-test"}"#,
    );
    assert_eq!(r.status, 201, "{}", r.body);
    r.json()["key"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_should_rate_limit_decide_as_v1_decide() {
    let w = start("");
    let (mut authz, mut rls) = clients(&w).await;

    // A burst: three admitted, then refused with Retry-After.
    let mut by_decide = Vec::new();
    let mut by_check = Vec::new();
    let mut by_rls = Vec::new();
    for _ in 0..5 {
        by_decide.push(decide(&w, "203.0.113.1", "/page?x=1", &[]));
        by_check.push(check(&mut authz, check_request("203.0.113.2", "/page?x=1", &[])).await);
        let d = entries(&[("remote_address", "203.0.113.3"), ("path", "/page?x=1")]);
        by_rls.push(should(&mut rls, rl_request(vec![d.clone(), d])).await);
    }
    let actions: Vec<_> = by_decide.iter().map(|s| s.action).collect();
    assert_eq!(actions, ["allow", "allow", "allow", "reject", "reject"]);
    assert_eq!(by_decide[0].remaining, "2");
    same(&by_decide, &by_check, "burst, Check");
    same(&by_decide, &by_rls, "burst, ShouldRateLimit");

    // A key holder, one key per surface: metered as the key (sponsor, burst 4) once its
    // lookup has landed (until then as its address, one rung down).
    let keys = [issue_key(&w), issue_key(&w), issue_key(&w)];
    let sponsor = |s: &Said| s.tier == "sponsor";
    let mut by_decide = Vec::new();
    let mut by_check = Vec::new();
    let mut by_rls = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sponsor(&decide(
        &w,
        "198.51.100.1",
        "/page",
        &[("x-api-key", &keys[0])],
    )) {
        assert!(Instant::now() < deadline, "key lookup");
    }
    while !sponsor(
        &check(
            &mut authz,
            check_request("198.51.100.2", "/page", &[("x-api-key", &keys[1])]),
        )
        .await,
    ) {
        assert!(Instant::now() < deadline, "key lookup");
    }
    let rl_key = entries(&[
        ("remote_address", "198.51.100.3"),
        ("path", "/page"),
        ("x-api-key", &keys[2]),
    ]);
    while !sponsor(&should(&mut rls, rl_request(vec![rl_key.clone()])).await) {
        assert!(Instant::now() < deadline, "key lookup");
    }
    for _ in 0..4 {
        by_decide.push(decide(
            &w,
            "198.51.100.1",
            "/page",
            &[("x-api-key", &keys[0])],
        ));
        by_check.push(
            check(
                &mut authz,
                check_request("198.51.100.2", "/page", &[("x-api-key", &keys[1])]),
            )
            .await,
        );
        by_rls.push(should(&mut rls, rl_request(vec![rl_key.clone()])).await);
    }
    let actions: Vec<_> = by_decide.iter().map(|s| s.action).collect();
    assert_eq!(
        actions,
        ["allow", "allow", "allow", "reject"],
        "{by_decide:?}"
    );
    assert!(by_decide.iter().all(sponsor));
    same(&by_decide, &by_check, "key holder, Check");
    same(&by_decide, &by_rls, "key holder, ShouldRateLimit");

    // A delay route: past the daily quota of 2, held 300 ms and then admitted (never a 429).
    let mut by_decide = Vec::new();
    let mut by_check = Vec::new();
    let mut by_rls = Vec::new();
    for _ in 0..4 {
        by_decide.push(decide(&w, "192.0.2.1", "/scan", &[]));
        by_check.push(check(&mut authz, check_request("192.0.2.2", "/scan", &[])).await);
        let d = entries(&[("remote_address", "192.0.2.3"), ("path", "/scan")]);
        by_rls.push(should(&mut rls, rl_request(vec![d])).await);
    }
    let actions: Vec<_> = by_decide.iter().map(|s| s.action).collect();
    assert_eq!(
        actions,
        ["allow", "allow", "delay", "delay"],
        "{by_decide:?}"
    );
    same(&by_decide, &by_check, "delay route, Check");
    same(&by_decide, &by_rls, "delay route, ShouldRateLimit");

    // `hits_addend` is the cost: 5 units on `/page` count as `/heavy`'s route cost of 5.
    let heavy = decide(&w, "192.0.2.10", "/heavy", &[]);
    let mut d = entries(&[("remote_address", "192.0.2.11"), ("path", "/page")]);
    d.hits_addend = Some(UInt64Value { value: 5 });
    let five = should(&mut rls, rl_request(vec![d])).await;
    let mut req = rl_request(vec![entries(&[
        ("remote_address", "192.0.2.12"),
        ("path", "/page"),
    ])]);
    req.hits_addend = 5;
    let five_too = should(&mut rls, req).await;
    assert!(
        heavy.windows.contains(&("hourly".to_string(), 95)),
        "{heavy:?}"
    );
    assert_eq!(heavy, five);
    assert_eq!(heavy, five_too);

    // Check from a trusted proxy (127.0.0.1): its X-Forwarded-For names the client.
    let behind = check(
        &mut authz,
        check_request(
            "127.0.0.1",
            "/page",
            &[("x-forwarded-for", "203.0.113.99, 127.0.0.1")],
        ),
    )
    .await;
    let direct = decide(&w, "203.0.113.99", "/page", &[]);
    assert_eq!(
        (behind.remaining.as_str(), direct.remaining.as_str()),
        ("2", "1")
    );
    drop(w);
}

/// The field a refused call names, from its status.
fn field(s: &tonic::Status) -> String {
    assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
    s.metadata()
        .get("x-limiter-field")
        .unwrap_or_else(|| panic!("no field in {s:?}"))
        .to_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_calls_are_invalid_argument_naming_the_field() {
    let w = start("");
    let (mut authz, mut rls) = clients(&w).await;
    let mut no_source = check_request("192.0.2.1", "/", &[]);
    no_source.attributes.as_mut().unwrap().source = None;
    let e = authz.check(no_source).await.unwrap_err();
    assert_eq!(field(&e), "attributes.source.address");
    assert!(e.message().contains("attributes.source.address"), "{e:?}");
    let e = authz
        .check(check_request("nope", "/", &[]))
        .await
        .unwrap_err();
    assert_eq!(
        field(&e),
        "attributes.source.address.socket_address.address"
    );
    let e = authz
        .check(check_request("192.0.2.1", "page", &[]))
        .await
        .unwrap_err();
    assert_eq!(field(&e), "attributes.request.http.path");

    let rl = |d: RateLimitDescriptor| rl_request(vec![d]);
    let e = rls
        .should_rate_limit(rl(entries(&[("path", "/")])))
        .await
        .unwrap_err();
    assert_eq!(field(&e), "descriptors");
    assert!(e.message().contains("remote_address"), "{e:?}");
    let e = rls.should_rate_limit(rl_request(vec![])).await.unwrap_err();
    assert_eq!(field(&e), "descriptors");
    let e = rls
        .should_rate_limit(rl(entries(&[("remote_address", "999.1.1.1")])))
        .await
        .unwrap_err();
    assert_eq!(field(&e), "descriptors[0].entries[0].value");
    let mut zero = entries(&[("remote_address", "192.0.2.1")]);
    zero.hits_addend = Some(UInt64Value { value: 0 });
    let e = rls.should_rate_limit(rl(zero)).await.unwrap_err();
    assert_eq!(field(&e), "descriptors[0].hits_addend");
    let mut huge = rl(entries(&[("remote_address", "192.0.2.1")]));
    huge.hits_addend = u32::MAX;
    let e = rls.should_rate_limit(huge).await.unwrap_err();
    assert_eq!(field(&e), "hits_addend");
    let e = rls
        .should_rate_limit(rl(entries(&[
            ("remote_address", "192.0.2.1"),
            ("bad key", "x"),
        ])))
        .await
        .unwrap_err();
    assert_eq!(field(&e), "descriptors[0].entries[1].key");
    // None of these counted: the address's first real call has its whole burst.
    let first = should(&mut rls, rl(entries(&[("remote_address", "192.0.2.1")]))).await;
    assert_eq!(first.remaining, "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_token_is_required_as_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let token = "grpc-token-0123456789abcdef";
    let file = dir.path().join("api-token");
    std::fs::write(&file, token).unwrap();
    private(&file);
    let w = start(&format!("api_token_file = \"{}\"\n", file.display()));
    let (mut authz, mut rls) = clients(&w).await;
    let ask = || rl_request(vec![entries(&[("remote_address", "192.0.2.50")])]);

    let e = rls.should_rate_limit(ask()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    let e = authz
        .check(check_request("192.0.2.51", "/", &[]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    let mut wrong = tonic::Request::new(ask());
    wrong
        .metadata_mut()
        .insert("authorization", "Bearer not-the-token".parse().unwrap());
    let e = rls.should_rate_limit(wrong).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");

    let mut bearer = tonic::Request::new(ask());
    bearer
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let r = rls.should_rate_limit(bearer).await.unwrap().into_inner();
    assert_eq!(r.overall_code, Code::Ok as i32);
    let mut bare = tonic::Request::new(check_request("192.0.2.51", "/", &[]));
    bare.metadata_mut()
        .insert("x-limiter-token", token.parse().unwrap());
    let r = authz.check(bare).await.unwrap().into_inner();
    assert!(matches!(r.http_response, Some(HttpResponse::OkResponse(_))));
    // Refused calls counted nothing: the second admitted call leaves 1 of the burst of 3.
    let mut again = tonic::Request::new(ask());
    again
        .metadata_mut()
        .insert("x-limiter-token", token.parse().unwrap());
    let r = rls.should_rate_limit(again).await.unwrap().into_inner();
    assert_eq!(r.statuses[0].limit_remaining, 1);
}

/// The values of every `key:` in `text`, in order, unquoted (`key: value` or `{ key: value }`).
/// Issue 35 on gRPC `Check`: a 429 names the tier and the hourly limit whatever its reason,
/// also on a route that counts no hourly window and for a locked caller; and a browser's
/// `Accept`, which Envoy passes in the request's headers, gets the page as the denied body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_check_names_tier_and_hourly_limit_and_a_browser_gets_the_page() {
    let w = start("[[routes]]\nprefix = \"/b\"\nlimits = [\"burst\"]\n");
    let (mut authz, _) = clients(&w).await;
    let mut denied = Vec::new();
    for _ in 0..5 {
        let accept = if denied.len() == 1 {
            "text/html,application/xhtml+xml,*/*;q=0.8"
        } else {
            "*/*"
        };
        let req = check_request("192.0.2.50", "/b", &[("accept", accept)]);
        let r = authz.check(req).await.expect("Check answers").into_inner();
        if let Some(HttpResponse::DeniedResponse(no)) = r.http_response {
            let h: HashMap<String, String> = no
                .headers
                .into_iter()
                .map(|o| o.header.unwrap())
                .map(|h| (h.key, h.value))
                .collect();
            denied.push((h, no.body));
        }
    }
    assert_eq!(denied.len(), 2, "the 4th (burst) and the 5th (locked)");
    for (h, _) in &denied {
        assert_eq!(h["x-ratelimit-tier"], "anon", "{h:?}");
        assert_eq!(h["x-ratelimit-limit-hour"], "100", "{h:?}");
    }
    let (h, body) = &denied[0];
    assert_eq!(h["content-type"], "application/problem+json");
    let p: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        (p["reason"].as_str(), p["hourlyLimit"].as_u64()),
        (Some("burst"), Some(100))
    );
    let (h, body) = &denied[1];
    assert_eq!(h["content-type"], "text/html; charset=utf-8", "{h:?}");
    assert!(
        h["content-security-policy"].starts_with("default-src 'none'"),
        "{h:?}"
    );
    for fact in [
        "<dd>locked</dd>",
        "<dd>anon</dd>",
        "<dd>100 units</dd>",
        "<a href=\"/login\">",
    ] {
        assert!(body.contains(fact), "{fact}: {body}");
    }
}

fn values(text: &str, key: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.match_indices(key).map(move |(i, _)| &l[i + key.len()..]))
        .map(|rest| {
            rest.trim()
                .split([',', '}', '#'])
                .next()
                .unwrap()
                .trim()
                .trim_matches('"')
                .to_string()
        })
        .collect()
}

/// `examples/envoy/envoy.yaml`'s gRPC listeners, as Envoy would call them: the cluster on the
/// documented `grpc_listen` port, gRPC ext_authz's `CheckRequest` (the source address Envoy
/// saw, its headers with the pseudo-headers), and the rate-limit filter's descriptors built by
/// the example's `rate_limits` actions (the key descriptor only when the header is there).
/// Two clients are metered apart and the burst's 429 is the daemon's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_envoy_example_grpc_calls_as_documented() {
    let text =
        std::fs::read_to_string(limiter_tests::workspace_root().join("examples/envoy/envoy.yaml"))
            .unwrap();
    assert_eq!(
        values(&text, "cluster_name: limiter_grpc").len(),
        3,
        "two filters and the cluster"
    );
    let cluster = &text[text
        .find("- name: limiter_grpc")
        .expect("the limiter_grpc cluster")..];
    assert_eq!(
        values(cluster, "port_value:")[0],
        "8082",
        "the documented grpc_listen"
    );
    assert!(
        cluster.contains("http2_protocol_options"),
        "gRPC needs HTTP/2 upstream"
    );
    assert!(text.contains("envoy.filters.http.ratelimit") && text.contains("grpc_service:"));
    assert_eq!(values(&text, "domain:"), ["app"]);
    let keys = values(&text, "descriptor_key:");
    assert_eq!(keys, ["path", "method", "x-api-key"]);
    assert_eq!(keys[0], "path", "the default [http] grpc_route_key");
    let timeouts = values(&text, "timeout:");
    assert!(
        timeouts.iter().filter(|t| *t == "120s").count() >= 3,
        "{timeouts:?}"
    );

    let w = start("");
    let (mut authz, mut rls) = clients(&w).await;
    // gRPC ext_authz: the client's own address as the source (Envoy at the edge).
    let envoy_check = |client: &str| {
        let mut r = check_request(
            client,
            "/reports?x=1",
            &[
                (":authority", "app.test"),
                (":method", "GET"),
                (":scheme", "http"),
                ("x-forwarded-for", client),
                ("x-forwarded-proto", "http"),
                ("x-request-id", "5f1c0a4e-2b7d-4c1e-9a55-0d6f3c2b9e10"),
                ("user-agent", "curl/7.88.1"),
            ],
        );
        let http = r
            .attributes
            .as_mut()
            .unwrap()
            .request
            .as_mut()
            .unwrap()
            .http
            .as_mut()
            .unwrap();
        http.host = "app.test".into();
        http.scheme = "http".into();
        http.protocol = "HTTP/1.1".into();
        r
    };
    for left in ["2", "1", "0"] {
        let s = check(&mut authz, envoy_check("203.0.113.40")).await;
        assert_eq!((s.action, s.remaining.as_str()), ("allow", left));
    }
    assert_eq!(
        check(&mut authz, envoy_check("203.0.113.40")).await.action,
        "reject"
    );
    assert_eq!(
        check(&mut authz, envoy_check("203.0.113.41"))
            .await
            .remaining,
        "2"
    );

    // The rate-limit filter: one descriptor per `rate_limits` entry whose actions all apply.
    let envoy_limits = |client: &str, key: Option<&str>| {
        let mut ds = vec![entries(&[
            ("remote_address", client),
            ("path", "/reports?x=1"),
            ("method", "GET"),
        ])];
        if let Some(k) = key {
            ds.push(entries(&[("remote_address", client), ("x-api-key", k)]));
        }
        rl_request(ds)
    };
    for left in ["2", "1", "0"] {
        let s = should(&mut rls, envoy_limits("203.0.113.50", None)).await;
        assert_eq!((s.action, s.remaining.as_str()), ("allow", left));
    }
    assert_eq!(
        should(&mut rls, envoy_limits("203.0.113.50", None))
            .await
            .action,
        "reject"
    );
    assert_eq!(
        should(&mut rls, envoy_limits("203.0.113.51", None))
            .await
            .remaining,
        "2"
    );
    // With the key descriptor, the caller is the key holder once its lookup has landed.
    let key = issue_key(&w);
    let deadline = Instant::now() + Duration::from_secs(10);
    while should(&mut rls, envoy_limits("203.0.113.50", Some(&key)))
        .await
        .tier
        != "sponsor"
    {
        assert!(Instant::now() < deadline, "key lookup");
    }
}

/// Issue 35, D4: `Check` reads the path as the upstream does. A dot segment in any spelling is
/// denied with a 400 problem (a denial, so an ext_authz filter that fails open on errors still
/// keeps it out), never metered as the route its raw text starts with; other spellings of
/// `/heavy` pay its cost. `ShouldRateLimit` cannot refuse: it meters the normal form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reads_the_path_as_the_upstream_does() {
    let w = start("");
    let (mut authz, mut rls) = clients(&w).await;
    for path in ["/page/../heavy", "/page/%2E%2E/heavy", "/page/..%2fheavy"] {
        let r = authz
            .check(check_request("198.18.1.1", path, &[]))
            .await
            .expect("Check answers")
            .into_inner();
        assert_eq!(
            r.status.unwrap().code,
            tonic::Code::PermissionDenied as i32,
            "{path}"
        );
        let Some(HttpResponse::DeniedResponse(no)) = r.http_response else {
            panic!("{path}: not denied");
        };
        assert_eq!(no.status.unwrap().code, 400, "{path}");
        let p: serde_json::Value = serde_json::from_str(&no.body).unwrap();
        assert_eq!(p["field"], "attributes.request.http.path", "{path}");
        assert!(p["detail"].as_str().unwrap().contains("dot segment"), "{p}");
    }
    let hourly = |s: &Said| {
        s.windows
            .iter()
            .find(|(n, _)| n == "hourly")
            .map(|(_, r)| *r)
    };
    let s = check(&mut authz, check_request("198.18.2.1", "//heavy?x=1", &[])).await;
    assert_eq!(hourly(&s), Some(95), "{s:?}");
    let s = check(&mut authz, check_request("198.18.2.1", "/%68eavy", &[])).await;
    assert_eq!(hourly(&s), Some(90), "{s:?}");
    let d = entries(&[
        ("remote_address", "198.18.3.1"),
        ("path", "/page/%2e%2e/heavy"),
    ]);
    let s = should(&mut rls, rl_request(vec![d])).await;
    assert_eq!(hourly(&s), Some(95), "{s:?}");
}

/// Issue 35, D3: `grpc_listen` had no read timeout and no connection cap: silent connections
/// and half-sent prefaces all stayed open, before any token was asked for. Now a connection
/// whose HTTP/2 preface has not come within `header_read_timeout` is closed, and past
/// `api_max_connections` a new one is closed at once; calls on connections that sent their
/// preface go on being answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_half_preface_connections_are_closed_and_capped() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let w = start("header_read_timeout = \"1s\"\napi_max_connections = 20\n");
    // Two connections that sent their preface (the clients' own), answered throughout
    // (admitted: a slow answer on a loaded machine reads as "delay", so only "reject" fails).
    let (mut authz, mut rls) = clients(&w).await;
    let me = || rl_request(vec![entries(&[("remote_address", "192.0.2.77")])]);
    assert_ne!(should(&mut rls, me()).await.action, "reject");
    // 40 more: silent, or a quarter of them half a preface. The cap leaves room for 18.
    let started = Instant::now();
    let mut waiting = tokio::task::JoinSet::new();
    for i in 0..40 {
        let mut s = tokio::net::TcpStream::connect(w.grpc).await.unwrap();
        if i % 4 == 0 {
            s.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
        }
        waiting.spawn(async move {
            let mut buf = [0u8; 64];
            // Ends with the daemon's close (EOF, or a reset when bytes were left unread).
            let closed = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await;
            assert!(
                matches!(closed, Ok(Ok(0) | Err(_))),
                "a silent connection got {closed:?}"
            );
            started.elapsed()
        });
    }
    let closed: Vec<Duration> = waiting.join_all().await;
    let at_once = closed
        .iter()
        .filter(|t| **t < Duration::from_millis(700))
        .count();
    assert!(at_once >= 22, "{at_once} of 40 closed at once: {closed:?}");
    let last = closed.iter().max().unwrap();
    assert!(
        *last < Duration::from_secs(4),
        "the last closed after {last:?}"
    );
    // The preface-less ones gave their places back; the client's connection was kept.
    assert_ne!(should(&mut rls, me()).await.action, "reject");
    let page = check(&mut authz, check_request("192.0.2.78", "/page", &[])).await;
    assert_ne!(page.action, "reject");
    // And new connections are let in again.
    let (mut fresh, _) = clients(&w).await;
    let page = check(&mut fresh, check_request("192.0.2.79", "/page", &[])).await;
    assert_ne!(page.action, "reject");
}

/// Each call is a line in the access log (`surface: grpc`): the client Envoy asked about, the
/// peer that asked, the status Envoy is told to give, and a refusal's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_should_rate_limit_write_access_log_lines() {
    let logs = tempfile::tempdir().unwrap();
    let path = logs.path().join("access.log");
    let w = start(&format!("[log]\naccess = \"{}\"\n", path.display()));
    let (mut authz, mut rls) = clients(&w).await;
    let mut said = Vec::new();
    for _ in 0..4 {
        let req = check_request(
            "203.0.113.20",
            "/page?q=1",
            &[("user-agent", "envoy-test/1")],
        );
        said.push(check(&mut authz, req).await.action);
    }
    assert_eq!(said, ["allow", "allow", "allow", "reject"]);
    let d = entries(&[("remote_address", "203.0.113.21"), ("path", "/page")]);
    assert_eq!(should(&mut rls, rl_request(vec![d])).await.action, "allow");

    let lines: Vec<serde_json::Value> = eventually("5 access log lines", || {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let v: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (v.len() >= 5).then_some(v)
    });
    let checks: Vec<_> = lines
        .iter()
        .filter(|l| l["client"] == "203.0.113.20")
        .collect();
    let statuses: Vec<_> = checks
        .iter()
        .map(|l| l["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, [200, 200, 200, 429], "{lines:#?}");
    for l in &checks {
        assert_eq!(l["surface"], "grpc");
        assert_eq!(l["peer"], "127.0.0.1");
        assert_eq!((&l["method"], &l["path"]), (&"GET".into(), &"/page".into()));
        assert_eq!(l["user_agent"], "envoy-test/1");
    }
    assert_eq!(checks[3]["action"], "reject");
    assert_eq!(checks[3]["reason"], "burst");
    let rls_line = lines
        .iter()
        .find(|l| l["client"] == "203.0.113.21")
        .expect("a ShouldRateLimit line");
    assert_eq!(
        (&rls_line["surface"], &rls_line["status"]),
        (&"grpc".into(), &200.into())
    );
    assert_eq!(rls_line["action"], "allow");
}
