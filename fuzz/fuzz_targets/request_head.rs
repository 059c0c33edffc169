//! The own loop's request-head inspection (`front::inspect`) on arbitrary client bytes.
//!
//! Besides "never panics", as the proptest in `front.rs` asserts: a served head goes upstream
//! as a complete, parseable HTTP/1.1 request whose last field is `X-Forwarded-For` ending with
//! the peer. And, beyond the proptest:
//! - the upstream head carries the client's method and target, every end-to-end field of the
//!   client in its order, no hop-by-hop field, exactly one `X-Forwarded-For`, and a `Host`
//!   whenever the client sent one or the proxy has one to add;
//! - the decision gets exactly the client's fields it asked for (as hyper's path gives it);
//! - the head is self-contained: its bytes alone give the same answer, and a strict prefix of
//!   it is `Partial` (a head split over two reads is served like one that came whole);
//! - a refusal is a 400 or a 431.
#![no_main]

use std::net::IpAddr;

use http::{HeaderMap, HeaderValue, Method};
use libfuzzer_sys::fuzz_target;
use limiter_daemon::fuzz_entry::{inspect, RequestHead, Served};
use limiter_daemon::edge::h1::hop::is_hop_by_hop_name;
use limiter_daemon::edge::limits::HeaderLimits;
use limiter_daemon::engine::decider::{Decider, RequestView};
use limiter_daemon::model::Decision;

/// Reads what the identity resolver reads with a key header and a trusted proxy configured,
/// and a key header named like a hop-by-hop field (the name is the operator's choice).
struct IdentityFields;

const READ: [&str; 6] = [
    "cookie",
    "authorization",
    "x-api-key",
    "x-forwarded-for",
    "forwarded",
    "proxy-api-key",
];

impl Decider for IdentityFields {
    fn decide(&self, _: &RequestView<'_>) -> Decision {
        unreachable!("inspect never decides")
    }

    fn reads_header(&self, name: &[u8]) -> bool {
        READ.iter().any(|r| r.as_bytes().eq_ignore_ascii_case(name))
    }
}

const LIMITS: HeaderLimits = HeaderLimits {
    max_count: 64,
    max_bytes: 4096,
};

fn run(wire: &[u8], peer: IpAddr) -> (RequestHead, Vec<u8>) {
    let mut up = Vec::new();
    let got = inspect(wire, LIMITS, &IdentityFields, peer, &mut up);
    (got, up)
}

fuzz_target!(|wire: &[u8]| {
    // Vary the peer's family from the input itself.
    let peer: IpAddr = if wire.len().is_multiple_of(2) {
        "198.51.100.7".parse().unwrap()
    } else {
        "2001:db8::7".parse().unwrap()
    };
    let (got, up) = run(wire, peer);
    match got {
        RequestHead::Partial | RequestHead::HandOver => {}
        RequestHead::Refused(status) => {
            assert!(
                status == 400 || status == 431 || status == 414,
                "refused with {status}"
            )
        }
        RequestHead::Served(served) => check_served(wire, &served, &up, peer),
    }
});

fn check_served(wire: &[u8], served: &Served, up: &[u8], peer: IpAddr) {
    assert!(served.len <= wire.len());
    let head = &wire[..served.len];

    // What the client sent, parsed independently.
    let mut client_fields = [httparse::EMPTY_HEADER; 128];
    let mut client = httparse::Request::new(&mut client_fields);
    assert_eq!(
        client.parse(head),
        Ok(httparse::Status::Complete(head.len())),
        "a served head parses"
    );
    assert_eq!(client.version, Some(1), "only HTTP/1.1 is served");
    let method = client.method.unwrap();
    assert!(
        ["GET", "HEAD", "OPTIONS"].contains(&method),
        "{method} served"
    );
    assert_eq!(
        served.method,
        Method::from_bytes(method.as_bytes()).unwrap()
    );
    let target = client.path.unwrap();
    assert!(target.starts_with('/'));
    assert_eq!(served.path, target.split('?').next().unwrap());

    // The proptest's invariant: a complete request ending with this client's hop.
    let mut up_fields = [httparse::EMPTY_HEADER; 160];
    let mut upstream = httparse::Request::new(&mut up_fields);
    assert_eq!(
        upstream.parse(up),
        Ok(httparse::Status::Complete(up.len())),
        "upstream head: {:?}",
        String::from_utf8_lossy(up)
    );
    let last = upstream.headers.last().unwrap();
    assert!(last.name.eq_ignore_ascii_case("x-forwarded-for"));
    let mut text = String::new();
    {
        use std::fmt::Write as _;
        write!(text, "{peer}").unwrap();
    }
    assert!(last.value.ends_with(text.as_bytes()), "{:?}", last.value);
    assert_eq!(upstream.method, Some(method));
    assert_eq!(upstream.path, Some(target));
    assert_eq!(upstream.version, Some(1));

    let is = |h: &httparse::Header<'_>, n: &str| h.name.eq_ignore_ascii_case(n);
    assert_eq!(
        upstream
            .headers
            .iter()
            .filter(|h| is(h, "x-forwarded-for"))
            .count(),
        1,
        "one X-Forwarded-For upstream"
    );
    for h in upstream.headers.iter() {
        assert!(
            !is_hop_by_hop_name(h.name.as_bytes()),
            "hop-by-hop {} sent upstream",
            h.name
        );
        assert!(!is(h, "content-length") && !is(h, "expect"));
    }
    // Every end-to-end client field goes upstream as it came, in order.
    let passed: Vec<(&str, &[u8])> = client
        .headers
        .iter()
        .filter(|h| !is_hop_by_hop_name(h.name.as_bytes()) && !is(h, "x-forwarded-for"))
        .map(|h| (h.name, h.value))
        .collect();
    let sent: Vec<(&str, &[u8])> = upstream
        .headers
        .iter()
        .filter(|h| !is(h, "x-forwarded-for"))
        .map(|h| (h.name, h.value))
        .collect();
    assert_eq!(sent, passed, "fields copied as they came");
    // RFC 9112 §3.2: a served HTTP/1.1 head had exactly one Host, and it went upstream.
    assert_eq!(client.headers.iter().filter(|h| is(h, "host")).count(), 1);
    assert_eq!(upstream.headers.iter().filter(|h| is(h, "host")).count(), 1);

    // The decision sees exactly the fields it reads, and `Accept` (which picks a refusal's
    // format: problem+json or a browser's page), as hyper's path would hand them over.
    let mut expected = HeaderMap::new();
    for h in client.headers.iter() {
        if IdentityFields.reads_header(h.name.as_bytes()) || is(h, "accept") {
            expected.append(
                http::HeaderName::from_bytes(h.name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(h.value).unwrap(),
            );
        }
    }
    assert_eq!(
        served.fields, expected,
        "the decision's fields differ from the client's"
    );

    // Self-contained, and split-proof.
    let (again, up_again) = run(head, peer);
    match again {
        RequestHead::Served(s) => {
            assert_eq!(
                (s.len, &s.path, s.close),
                (served.len, &served.path, served.close)
            );
            assert_eq!(up_again, up);
        }
        other => panic!("the head alone gave {other:?}"),
    }
    for cut in [served.len - 1, served.len / 2, served.len / 3] {
        let (part, _) = run(&wire[..cut], peer);
        assert!(
            matches!(part, RequestHead::Partial),
            "prefix of {cut} bytes gave {part:?}"
        );
    }
}
