//! A request path as the upstream reads it, and the spellings no surface accepts.
//!
//! Routes are chosen on [`normal`], never on the raw target: the raw target is what the client
//! typed, the normal form is what nginx serves (checked against nginx 1.22 by
//! `limiter-daemon/tests/http/http_nginx.rs`). nginx, for location matching, cuts the path at `?`
//! or `#`, decodes every `%XX` once (`%2F` included: it separates segments), merges `//` and
//! removes `.` and `..` segments (RFC 3986 §5.2.4). Routing on the raw target let
//! `/healthz/../reader` be metered as the free `/healthz` while nginx served `/reader`.
//!
//! Upstreams do not agree on every spelling, though: `..;` is `..` to Tomcat and a plain name
//! to nginx, `\` separates segments on IIS and not on nginx, and an app that reads the raw
//! target sees `%2F..%2F` as data. So a target with a dot segment in any of those readings is
//! refused ([`refusal`]) on every surface that can refuse, rather than forwarded or metered
//! under a guess. No ordinary client sends one: browsers, curl, wget, urllib3 and httpx all
//! remove dot segments before sending (RFC 3986 §5.2: resolving a reference removes them).
//!
//! The normal form is text: after decoding, the bytes that would change its reading (`%`,
//! `?`, `#`, controls, space and everything outside ASCII) are encoded again, upper-case, so
//! normalising is idempotent and a route's prefix, normalised the same way, compares byte for
//! byte.

use std::borrow::Cow;

use percent_encoding::{percent_decode, percent_encode, AsciiSet, CONTROLS};

/// What the normal form keeps encoded: what would otherwise end the path (`?`, `#`), start an
/// escape (`%`), or is not a visible ASCII character.
const KEPT_ENCODED: &AsciiSet = &CONTROLS.add(b' ').add(b'%').add(b'?').add(b'#');

/// Why a target is refused; [`Refusal::detail`] is the sentence a client reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A `.` or `..` segment, in some spelling (`%2e`, `;params`, `\` or `%2F` around it).
    DotSegment,
}

impl Refusal {
    pub fn detail(self) -> &'static str {
        match self {
            Refusal::DotSegment => {
                "The path has a `.` or `..` segment (perhaps spelled `%2e`, or next to `%2f`, \
                 `\\` or `;`). Upstreams read such a path differently, so it is not forwarded or \
                 metered: resolve the dot segments before sending (RFC 3986, section 5.2.4)."
            }
        }
    }
}

/// The part of a request target that names the resource: an absolute-form target
/// (`http://host/p?q`) loses its scheme and authority, any target its query and fragment.
fn path_part(target: &str) -> &str {
    let target = match target.find("://") {
        Some(i) if !target[..i].contains('/') => {
            let rest = &target[i + 3..];
            rest.find(['/', '?', '#']).map_or("", |j| &rest[j..])
        }
        _ => target,
    };
    // A byte scan: both delimiters are ASCII.
    target
        .bytes()
        .position(|b| b == b'?' || b == b'#')
        .map_or(target, |end| &target[..end])
}

/// Whether `path` is already its own normal form: it starts with `/`, holds no escape, no
/// `//`, no segment starting with `.` and nothing [`KEPT_ENCODED`] would encode.
fn plainly_normal(path: &str) -> bool {
    let b = path.as_bytes();
    b.first() == Some(&b'/')
        && b.iter()
            .all(|&c| c.is_ascii_graphic() && c != b'%' && c != b'?' && c != b'#')
        && !b
            .windows(2)
            .any(|w| w[0] == b'/' && (w[1] == b'/' || w[1] == b'.'))
}

/// The path of `target` as nginx reads it for location matching: query and fragment cut,
/// every escape decoded once, `//` merged, `.` and `..` removed (`..` above the root stays at
/// the root), then what [`KEPT_ENCODED`] names encoded again. Always starts with `/`.
pub fn normal(target: &str) -> Cow<'_, str> {
    let path = path_part(target);
    if plainly_normal(path) {
        return Cow::Borrowed(path);
    }
    let decoded: Vec<u8> = percent_decode(path.as_bytes()).collect();
    let mut segments: Vec<&[u8]> = Vec::new();
    // A path ending in `/`, `/.` or `/..` names a directory: its trailing `/` stays.
    let mut directory = false;
    for seg in decoded.split(|&b| b == b'/') {
        directory = true;
        match seg {
            b"" | b"." => {}
            b".." => {
                segments.pop();
            }
            name => {
                segments.push(name);
                directory = false;
            }
        }
    }
    let mut out = String::with_capacity(path.len());
    for seg in &segments {
        out.push('/');
        out.extend(percent_encode(seg, KEPT_ENCODED));
    }
    if directory || segments.is_empty() {
        out.push('/');
    }
    Cow::Owned(out)
}

/// Why `target` must not be forwarded or metered, if it must not: it has a dot segment in
/// one upstream's reading or another (after one decoding, with `/` or `\` separating segments
/// and a segment's `;parameters` dropped).
pub fn refusal(target: &str) -> Option<Refusal> {
    let path = path_part(target).as_bytes();
    // Fast path: a dot segment needs a `.`, or an escape that may decode to one.
    if !path.iter().any(|&b| b == b'.' || b == b'%') {
        return None;
    }
    let decoded: Vec<u8> = percent_decode(path).collect();
    let dot = decoded
        .split(|&b| b == b'/' || b == b'\\')
        .map(|seg| seg.split(|&b| b == b';').next().unwrap_or(seg))
        .any(|name| name == b"." || name == b"..");
    dot.then_some(Refusal::DotSegment)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What nginx 1.22 served each spelling as (`$uri`), checked by hand and by
    /// `http_nginx.rs`; `None` where nginx itself answers 400.
    const NGINX: &[(&str, &str)] = &[
        ("/reader", "/reader"),
        ("/healthz/../reader", "/reader"),
        ("/healthz/%2e%2e/reader", "/reader"),
        ("/healthz/%2E%2E/reader", "/reader"),
        ("/healthz/.%2e/reader", "/reader"),
        ("/x/../reader", "/reader"),
        ("/./reader", "/reader"),
        ("//reader", "/reader"),
        ("/healthz/..%2freader", "/reader"),
        ("/healthz%2f..%2freader", "/reader"),
        ("/healthz%2F%2E%2E%2Freader", "/reader"),
        ("/healthz;/../reader", "/reader"),
        ("/reader/..", "/"),
        ("/reader/%2e", "/reader/"),
        ("/reader%2F..", "/"),
        ("/%72eader", "/reader"),
        ("/read%65r", "/reader"),
        ("/healthz/../reader?x=1", "/reader"),
        ("/healthz/..#/reader", "/"),
        ("/healthz/..?/reader", "/"),
        ("/healthz\\..\\reader", "/healthz\\..\\reader"),
        ("/healthz/..;/reader", "/healthz/..;/reader"),
        ("/healthz/%252e%252e/reader", "/healthz/%252e%252e/reader"),
        ("/healthz/..%3freader", "/healthz/..%3Freader"),
        ("/healthz/%23/../reader", "/healthz/reader"),
        ("/healthz/...", "/healthz/..."),
        ("/a/%2e%2e%2e", "/a/..."),
        ("/reader%ff", "/reader%FF"),
        ("/api/feeds/", "/api/feeds/"),
        ("/", "/"),
        ("http://example.org/healthz/../reader?q", "/reader"),
        ("http://example.org", "/"),
    ];

    #[test]
    fn normal_form_is_what_nginx_serves() {
        for (raw, want) in NGINX {
            assert_eq!(normal(raw), *want, "{raw}");
        }
    }

    #[test]
    fn plain_paths_are_borrowed() {
        for p in ["/reader", "/api/feeds/1", "/a-b_c~d/e.html", "/"] {
            assert!(matches!(normal(p), Cow::Borrowed(_)), "{p}");
        }
        assert!(matches!(normal("/a?x=1"), Cow::Borrowed("/a")));
    }

    #[test]
    fn dot_segments_in_every_reading_are_refused() {
        for raw in [
            "/healthz/../reader",
            "/healthz/%2e%2e/reader",
            "/healthz/%2E%2E/reader",
            "/x/../reader",
            "/./reader",
            "/healthz/..%2freader",
            "/reader/..",
            "/healthz%2f..%2freader",
            "/healthz\\..\\reader",
            "/healthz/..%5creader",
            "/healthz/..;/reader",
            "/healthz/.;x/reader",
            "/reader/%2e",
            "/..",
            "http://h/a/../b",
        ] {
            assert_eq!(refusal(raw), Some(Refusal::DotSegment), "{raw}");
        }
        for raw in [
            "/reader",
            "//reader",
            "/%72eader",
            "/healthz/.../reader",
            "/.well-known/x",
            "/a/..b/c.d",
            "/healthz/%252e%252e/reader",
            "/reader?next=/../x",
            "/reader#/../x",
        ] {
            assert_eq!(refusal(raw), None, "{raw}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Targets built from the pieces that change a reading, and arbitrary strings besides.
        #[test]
        fn normalising_is_idempotent_and_never_panics(
            pieces in proptest::collection::vec(
                prop_oneof![
                    Just("/"), Just("."), Just(".."), Just("%2e"), Just("%2E"), Just("%2f"),
                    Just("%2F"), Just("%25"), Just("%"), Just("%zz"), Just("?"), Just("#"),
                    Just(";"), Just("\\"), Just("%5c"), Just("a"), Just("é"), Just("%ff"),
                    Just("%3f"), Just("%23"), Just(" "), Just("://"),
                ],
                0..24,
            ),
            any_text in ".*",
        ) {
            for target in [pieces.concat(), any_text] {
                let once = normal(&target).into_owned();
                prop_assert!(once.starts_with('/'), "{target:?} -> {once:?}");
                prop_assert_eq!(normal(&once).into_owned(), once, "{:?}", target);
                // Refusing reads the same pieces; it must not panic either.
                let _ = refusal(&target);
            }
        }
    }
}
