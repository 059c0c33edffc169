//! Header hygiene between client, proxy and upstream: hop-by-hop fields are removed in both
//! directions (RFC 9110 §7.6.1: `Connection` and every field it names, `Keep-Alive`, `TE`,
//! `Trailer`, `Transfer-Encoding`, `Upgrade`, `Proxy-*`), and the client's address is appended to
//! `X-Forwarded-For`. Everything else passes untouched.

use std::io::Write as _;
use std::net::IpAddr;

use http::header::{CONNECTION, TE, TRAILER, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderMap, HeaderName, HeaderValue};

pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");

/// The hop-by-hop rule on a parsed name: the same list as [`is_hop_by_hop_name`], which is the
/// one place it is written.
fn is_hop_by_hop(k: &HeaderName) -> bool {
    is_hop_by_hop_name(k.as_str().as_bytes())
}

/// Whether a field name, as it came off the wire (any case), is hop-by-hop: the one list both
/// of the proxy's loops and its upstream client apply.
pub fn is_hop_by_hop_name(name: &[u8]) -> bool {
    [
        CONNECTION,
        KEEP_ALIVE,
        TE,
        TRAILER,
        TRANSFER_ENCODING,
        UPGRADE,
    ]
    .iter()
    .any(|k| k.as_str().as_bytes().eq_ignore_ascii_case(name))
        || name
            .get(..6)
            .is_some_and(|p| p.eq_ignore_ascii_case(b"proxy-"))
}

/// `ip` as text, rendered into `buf` (IPv4, the commonest case, without `fmt`).
pub fn ip_text(ip: IpAddr, buf: &mut [u8; 48]) -> &[u8] {
    let mut len = 0;
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    buf[len] = b'.';
                    len += 1;
                }
                let mut digits = itoa::Buffer::new();
                let d = digits.format(octet).as_bytes();
                buf[len..len + d.len()].copy_from_slice(d);
                len += d.len();
            }
        }
        IpAddr::V6(_) => {
            let mut cur = std::io::Cursor::new(&mut buf[..]);
            // 48 bytes hold any IPv6 text (at most 45).
            if write!(cur, "{ip}").is_ok() {
                len = usize::try_from(cur.position()).unwrap_or(0);
            }
        }
    }
    &buf[..len]
}

/// Removes hop-by-hop fields from `h`.
pub fn strip_hop_by_hop(h: &mut HeaderMap) {
    // One scan collects what is there: most messages carry at most `Connection` (upstreams
    // answer `Connection: keep-alive`), and then only that one field is hashed and removed.
    let mut found: [Option<HeaderName>; 8] = Default::default();
    let mut n = 0;
    let mut more = false;
    for k in h.keys().filter(|k| is_hop_by_hop(k)) {
        match found.get_mut(n) {
            Some(slot) => {
                *slot = Some(k.clone());
                n += 1;
            }
            None => more = true,
        }
    }
    if n == 0 {
        return;
    }
    // Fields named in `Connection` first, while it is still there.
    if h.contains_key(CONNECTION) {
        let named: Vec<HeaderName> = h
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            // The usual tokens name no field: skipping them keeps this Vec unallocated.
            .filter(|t| !t.eq_ignore_ascii_case("keep-alive") && !t.eq_ignore_ascii_case("close"))
            .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
            .collect();
        for name in named {
            h.remove(name);
        }
    }
    for name in found.iter_mut().filter_map(Option::take) {
        h.remove(name);
    }
    if more {
        // More than eight distinct hop-by-hop names (many `Proxy-*`): collect the rest.
        let rest: Vec<HeaderName> = h.keys().filter(|k| is_hop_by_hop(k)).cloned().collect();
        for name in rest {
            h.remove(name);
        }
    }
}

/// Appends `client` to `X-Forwarded-For`, folding earlier fields into one list.
pub fn append_forwarded_for(h: &mut HeaderMap, client: IpAddr) {
    if !h.contains_key(&X_FORWARDED_FOR) {
        // Rendered on the stack: one allocation (the value's), not two.
        let mut buf = [0u8; 48];
        if let Ok(v) = HeaderValue::from_bytes(ip_text(client, &mut buf)) {
            h.insert(X_FORWARDED_FOR, v);
        }
        return;
    }
    let client = client.to_string();
    let mut prior = h.get_all(&X_FORWARDED_FOR).iter();
    let value = match (prior.next(), prior.next()) {
        (None, _) => client,
        (Some(one), None) => match one.to_str() {
            Ok(s) => format!("{s}, {client}"),
            Err(_) => client,
        },
        _ => {
            let mut all: Vec<&str> = h
                .get_all(&X_FORWARDED_FOR)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            all.push(&client);
            all.join(", ")
        }
    };
    if let Ok(v) = HeaderValue::from_str(&value) {
        h.insert(X_FORWARDED_FOR, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn strips_listed_and_named_fields_only() {
        let mut h = map(&[
            ("connection", "keep-alive, x-secret-hop"),
            ("x-secret-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("trailer", "x-sum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic abc"),
            ("proxy-connection", "keep-alive"),
            ("x-app", "kept"),
            ("cookie", "session=1"),
        ]);
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, vec!["cookie", "x-app"]);
    }

    #[test]
    fn more_hop_by_hop_names_than_the_scan_holds_are_all_stripped() {
        let names: Vec<String> = (0..12).map(|i| format!("proxy-x{i}")).collect();
        let mut pairs: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
        pairs.push(("connection", "close"));
        pairs.push(("x-app", "kept"));
        let mut h = map(&pairs);
        strip_hop_by_hop(&mut h);
        assert_eq!(h.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["x-app"]);
    }

    #[test]
    fn usual_connection_tokens_and_clean_maps() {
        let mut h = map(&[("connection", "Keep-Alive"), ("close", "x"), ("x-app", "1")]);
        strip_hop_by_hop(&mut h);
        // `close` is a token, not a field name: a field called `close` stays.
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, vec!["close", "x-app"]);
        let mut clean = map(&[("host", "a"), ("x-app", "1")]);
        strip_hop_by_hop(&mut clean);
        assert_eq!(clean.len(), 2);
    }

    #[test]
    fn forwarded_for_appends_and_folds() {
        for ip in [
            "192.0.2.1",
            "0.0.0.0",
            "255.255.255.255",
            "10.20.0.9",
            "2001:db8::7",
        ] {
            let mut h = HeaderMap::new();
            append_forwarded_for(&mut h, ip.parse().unwrap());
            assert_eq!(h[&X_FORWARDED_FOR], ip);
        }
        let mut h = map(&[
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-for", "10.0.0.2"),
        ]);
        append_forwarded_for(&mut h, "2001:db8::1".parse().unwrap());
        assert_eq!(h[&X_FORWARDED_FOR], "10.0.0.1, 10.0.0.2, 2001:db8::1");
    }
}
