use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::google::protobuf::UInt64Value;

use super::*;

const LIMITS: HeaderLimits = HeaderLimits {
    max_count: 4,
    max_bytes: 1024,
};

fn d(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..Default::default()
    }
}

fn req(descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: "envoy".into(),
        descriptors,
        hits_addend: hits,
    }
}

fn field_of(r: &RateLimitRequest) -> String {
    read(r, "path", LIMITS).unwrap_err().field
}

#[test]
fn entries_become_the_request() {
    let r = req(
        vec![
            d(&[("remote_address", "::ffff:203.0.113.9"), ("path", "/a?x=1")]),
            d(&[
                ("remote_address", "203.0.113.9"),
                ("method", "POST"),
                ("X-Api-Key", "k"),
                ("x-forwarded-for", "198.51.100.1"),
                ("generic_key", "shop"),
            ]),
            d(&[("x-api-key", "k")]),
        ],
        0,
    );
    let call = read(&r, "path", LIMITS).unwrap();
    let got = &call.request;
    assert_eq!(got.ip, "203.0.113.9".parse::<IpAddr>().unwrap());
    assert_eq!((&got.method, got.path.as_str()), (&Method::POST, "/a"));
    assert_eq!(got.headers.get_all("x-api-key").iter().count(), 1);
    assert!(got.headers.get("x-forwarded-for").is_none());
    assert_eq!(got.headers["generic_key"], "shop");
    assert_eq!(call.cost, None);
    // Defaults: GET on `/`; another route key.
    let plain = read(
        &req(vec![d(&[("remote_address", "::1"), ("route", "/r")])], 3),
        "route",
        LIMITS,
    )
    .unwrap();
    assert_eq!(
        (&plain.request.method, plain.request.path.as_str()),
        (&Method::GET, "/r")
    );
    assert_eq!(plain.cost, NonZeroU32::new(3));
}

#[test]
fn hits_addend_is_the_cost_within_bounds() {
    let mut one = d(&[("remote_address", "192.0.2.1")]);
    one.hits_addend = Some(UInt64Value { value: 7 });
    assert_eq!(
        read(&req(vec![one.clone()], 2), "path", LIMITS)
            .unwrap()
            .cost,
        NonZeroU32::new(7)
    );
    let mut zero = one.clone();
    zero.hits_addend = Some(UInt64Value { value: 0 });
    assert_eq!(field_of(&req(vec![zero], 0)), "descriptors[0].hits_addend");
    let mut huge = one.clone();
    huge.hits_addend = Some(UInt64Value {
        value: MAX_HITS_ADDEND + 1,
    });
    assert_eq!(field_of(&req(vec![huge], 0)), "descriptors[0].hits_addend");
    let mut other = one.clone();
    other.hits_addend = Some(UInt64Value { value: 8 });
    assert_eq!(
        field_of(&req(vec![one.clone(), other], 0)),
        "descriptors[1].hits_addend"
    );
    let plain = d(&[("remote_address", "192.0.2.1")]);
    let e = read(&req(vec![plain.clone()], 2_000_000), "path", LIMITS).unwrap_err();
    assert_eq!(e.field, "hits_addend");
    assert!(e.message.contains("1000000"), "{e}");
    let mut neg = plain.clone();
    neg.is_negative_hits = true;
    assert_eq!(
        field_of(&req(vec![neg], 0)),
        "descriptors[0].is_negative_hits"
    );
    let mut lim = plain;
    lim.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 1,
    });
    assert_eq!(field_of(&req(vec![lim], 0)), "descriptors[0].limit");
}

#[test]
fn bad_calls_name_the_field() {
    assert_eq!(field_of(&req(vec![], 0)), "descriptors");
    assert_eq!(field_of(&req(vec![d(&[("path", "/a")])], 0)), "descriptors");
    assert_eq!(
        field_of(&req(vec![d(&[("remote_address", "nope")])], 0)),
        "descriptors[0].entries[0].value"
    );
    assert_eq!(
        field_of(&req(
            vec![d(&[("remote_address", "192.0.2.1"), ("path", "a")])],
            0
        )),
        "descriptors[0].entries[1].value"
    );
    assert_eq!(
        field_of(&req(
            vec![d(&[("remote_address", "192.0.2.1"), ("method", "G T")])],
            0
        )),
        "descriptors[0].entries[1].value"
    );
    assert_eq!(
        field_of(&req(
            vec![
                d(&[("remote_address", "192.0.2.1")]),
                d(&[("remote_address", "192.0.2.2")])
            ],
            0
        )),
        "descriptors[1].entries[0].value"
    );
    assert_eq!(
        field_of(&req(
            vec![d(&[("remote_address", "192.0.2.1"), ("", "x")])],
            0
        )),
        "descriptors[0].entries[1].key"
    );
    assert_eq!(
        field_of(&req(
            vec![d(&[("remote_address", "192.0.2.1"), ("bad key", "x")])],
            0
        )),
        "descriptors[0].entries[1].key"
    );
    assert_eq!(
        field_of(&req(
            vec![d(&[("remote_address", "192.0.2.1"), ("x", "a\nb")])],
            0
        )),
        "descriptors[0].entries[1].value"
    );
    let many: Vec<(String, String)> = (0..5).map(|i| (format!("h{i}"), "v".to_string())).collect();
    let mut e: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    e.push(("remote_address", "192.0.2.1"));
    assert_eq!(field_of(&req(vec![d(&e)], 0)), "descriptors");
}
