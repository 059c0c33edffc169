//! The `/v1/decide` body parser (`http::api::decide_body::parse`) on arbitrary bytes.
//!
//! Besides "never panics":
//! - an accepted body describes a path starting with `/` without its query (a prefix of the
//!   path sent), `GET` when no method was given, and no forwarding field (a caller cannot pick
//!   the client address it is decided as);
//! - what was accepted, written back as a body, is accepted again as the same request;
//! - a refusal names a field of the body, or none when the body is not a JSON object.
#![no_main]

use libfuzzer_sys::fuzz_target;
use limiter_daemon::surfaces::api::decide_body::{parse, DescribeError, Described};
use limiter_daemon::edge::limits::HeaderLimits;
use serde_json::{json, Map, Value};

fn written_back(d: &Described) -> Vec<u8> {
    let mut headers = Map::new();
    for name in d.headers.keys() {
        let values: Vec<Value> = d
            .headers
            .get_all(name)
            .iter()
            .map(|v| {
                // Accepted from a JSON string, so UTF-8 (obs-text included).
                let text = std::str::from_utf8(v.as_bytes()).expect("accepted values are UTF-8");
                Value::String(text.to_string())
            })
            .collect();
        headers.insert(name.as_str().to_string(), Value::Array(values));
    }
    serde_json::to_vec(&json!({
        "ip": d.ip.to_string(),
        "method": d.method.as_str(),
        "path": d.path,
        "headers": headers,
    }))
    .unwrap()
}

/// The daemon's defaults (`[http] max_header_count`, `max_header_bytes`).
const LIMITS: HeaderLimits = HeaderLimits {
    max_count: 64,
    max_bytes: 16 * 1024,
};

fuzz_target!(|body: &[u8]| {
    match parse(body, LIMITS) {
        Ok(d) => {
            assert!(
                d.path.starts_with('/') && !d.path.contains('?'),
                "{:?}",
                d.path
            );
            // serde_json's `Value` refuses numbers past f64 (`1e800`) that JSON's grammar allows
            // and the parser skips in unknown fields: compare with it only when it reads the body.
            if let Ok(sent) = serde_json::from_slice::<Value>(body) {
                let sent_path = sent["path"].as_str().unwrap();
                assert!(sent_path.starts_with(&d.path));
                if sent.get("method").is_none_or(Value::is_null) {
                    assert_eq!(d.method, http::Method::GET);
                }
            }
            for name in ["x-forwarded-for", "forwarded", "x-real-ip"] {
                assert!(!d.headers.contains_key(name), "{name} kept");
            }
            let again = parse(&written_back(&d), LIMITS).expect("written back, it is refused");
            assert_eq!(
                (again.ip, &again.method, &again.path, &again.headers),
                (d.ip, &d.method, &d.path, &d.headers)
            );
        }
        Err(err) => {
            assert!(!err.to_string().is_empty());
            match &err {
                DescribeError::NotJson(_) | DescribeError::NotObject => {
                    assert_eq!(err.field(), None)
                }
                DescribeError::Missing(f) => assert!(["ip", "path"].contains(f), "{f}"),
                DescribeError::Invalid { field, .. } => assert!(
                    ["ip", "method", "path", "headers"].contains(&field.as_str())
                        || field.starts_with("headers."),
                    "{field}"
                ),
                DescribeError::TooManyHeaders { .. } | DescribeError::HeadersTooLarge { .. } => {
                    assert_eq!(err.field().as_deref(), Some("headers"))
                }
            }
        }
    }
});
