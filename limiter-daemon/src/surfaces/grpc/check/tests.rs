use envoy_types::pb::envoy::config::core::v3::{
    Address as EnvoyAddress, HeaderMap as EnvoyHeaderMap, HeaderValue as EnvoyHeader, Pipe,
    SocketAddress,
};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{
    HttpRequest, Peer, Request as Req,
};
use envoy_types::pb::envoy::service::auth::v3::AttributeContext;

use super::*;

const LIMITS: HeaderLimits = HeaderLimits {
    max_count: 8,
    max_bytes: 1024,
};

fn check(source: Option<Address>, http: Option<HttpRequest>) -> CheckRequest {
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(Peer {
                address: Some(EnvoyAddress { address: source }),
                ..Default::default()
            }),
            request: http.map(|h| Req {
                http: Some(h),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

fn sock(a: &str) -> Option<Address> {
    Some(Address::SocketAddress(SocketAddress {
        address: a.into(),
        ..Default::default()
    }))
}

fn http(method: &str, path: &str, headers: &[(&str, &str)]) -> HttpRequest {
    HttpRequest {
        method: method.into(),
        path: path.into(),
        headers: headers
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect(),
        ..Default::default()
    }
}

fn field_of(r: &CheckRequest) -> String {
    asked(r, LIMITS).unwrap_err().field
}

#[test]
fn the_attributes_describe_the_request() {
    let r = check(
        sock("::ffff:198.51.100.7"),
        Some(http(
            "POST",
            "/reports?x=1",
            &[
                (":path", "/reports?x=1"),
                ("cookie", "s=1"),
                ("x-forwarded-for", "203.0.113.1"),
            ],
        )),
    );
    let a = asked(&r, LIMITS).unwrap();
    assert_eq!(a.peer, "198.51.100.7".parse::<IpAddr>().unwrap());
    assert_eq!((a.method, a.path.as_str()), (Method::POST, "/reports"));
    assert_eq!(a.headers["cookie"], "s=1");
    // Kept: the engine walks it when Envoy's peer is a trusted proxy.
    assert_eq!(a.headers["x-forwarded-for"], "203.0.113.1");
    assert_eq!(a.headers.len(), 2);
    // Raw headers (`encode_raw_headers`) when the map is empty.
    let mut raw = http("GET", "/", &[]);
    raw.header_map = Some(EnvoyHeaderMap {
        headers: vec![EnvoyHeader {
            key: "X-Api-Key".into(),
            raw_value: b"k1".to_vec(),
            ..Default::default()
        }],
    });
    let a = asked(&check(sock("192.0.2.1"), Some(raw)), LIMITS).unwrap();
    assert_eq!(a.headers["x-api-key"], "k1");
}

#[test]
fn a_call_without_what_the_request_needs_names_the_field() {
    assert_eq!(field_of(&CheckRequest { attributes: None }), "attributes");
    assert_eq!(
        field_of(&check(None, Some(http("GET", "/", &[])))),
        "attributes.source.address"
    );
    let pipe = Some(Address::Pipe(Pipe {
        path: "/run/x".into(),
        mode: 0,
    }));
    assert_eq!(
        field_of(&check(pipe, Some(http("GET", "/", &[])))),
        "attributes.source.address"
    );
    assert_eq!(
        field_of(&check(sock("nope"), Some(http("GET", "/", &[])))),
        "attributes.source.address.socket_address.address"
    );
    assert_eq!(
        field_of(&check(sock("192.0.2.1"), None)),
        "attributes.request.http"
    );
    assert_eq!(
        field_of(&check(sock("192.0.2.1"), Some(http("G T", "/", &[])))),
        "attributes.request.http.method"
    );
    assert_eq!(
        field_of(&check(sock("192.0.2.1"), Some(http("GET", "x", &[])))),
        "attributes.request.http.path"
    );
    assert_eq!(
        field_of(&check(
            sock("192.0.2.1"),
            Some(http("GET", "/", &[("x", "a\nb")]))
        )),
        "attributes.request.http.headers.x"
    );
}
