//! What an operator types, parsed one way wherever it is typed: limiterctl's arguments,
//! `limiter-daemon kernel …` and the admin API's bodies and paths. Each parser returns a
//! message naming the value, so a mistake is a usage error (exit 2) or a 400 naming it.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;

use crate::address::{canonical_ip, canonical_net, mapped_overlap};
use crate::duration_text::{self, Units};
use crate::tier::Tier;

/// The longest lockout or list entry an operator may set: ten years.
pub const MAX_DURATION: Duration = Duration::from_secs(3650 * 86_400);

/// Shortest prefixes a CIDR lockout may have: wider nets are deny-list material.
pub const MIN_V4_PREFIX: u8 = 8;
pub const MIN_V6_PREFIX: u8 = 16;

/// Parses an IP address (IPv4, IPv6, or IPv4-mapped IPv6, which is the IPv4 address it
/// carries: see [`crate::address`]).
pub fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.trim()
        .parse::<IpAddr>()
        .map(canonical_ip)
        .map_err(|_| format!("{s:?} is not an IP address (expected e.g. 192.0.2.7 or 2001:db8::1)"))
}

/// Parses a CIDR; a bare address means a single host. Host bits set is refused, since
/// `10.0.0.1/8` is almost always a typo for something else. A CIDR inside the IPv4-mapped
/// block is the IPv4 CIDR it stands for; an IPv6 range wider than that block is refused, since
/// the kernel would match every IPv4 address with it.
pub fn parse_cidr(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    let net = if s.contains('/') {
        s.parse::<IpNet>().map_err(|_| {
            format!("{s:?} is not a CIDR (expected e.g. 198.51.100.0/24 or 2001:db8::/48)")
        })?
    } else {
        IpNet::from(parse_ip(s)?)
    };
    if net.trunc() != net {
        return Err(format!(
            "{s:?} has host bits set; did you mean {}?",
            net.trunc()
        ));
    }
    if mapped_overlap(net) {
        return Err(format!(
            "{s:?} takes in ::ffff:0:0/96, where IPv4 addresses live (it would cover all of \
             IPv4 too); name IPv4 ranges as IPv4 and IPv6 ranges outside that block"
        ));
    }
    Ok(canonical_net(net))
}

/// Parses a positive duration such as `90s`, `10m`, `1h30m`, `7d`, `2w`: the operator grammar
/// of [`duration_text`] (units `s m h d w`, case-sensitive, so `10M` is an error, not months).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = duration_text::parse(s, Units::Operator).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err(format!("{s:?}: the duration must be longer than zero"));
    }
    // A deadline must stay a date every store, log and RFC 3339 answer can write; a lockout
    // meant to last is better a deny-list entry without a deadline.
    if d > MAX_DURATION {
        return Err(format!(
            "{s:?}: at most 3650 days (for an entry without end, use the deny list with no `for`)"
        ));
    }
    Ok(d)
}

pub fn parse_tier(s: &str) -> Result<Tier, String> {
    Tier::parse(s)
        .ok_or_else(|| format!("{s:?} is not a tier (anon, session, crawler, agent, sponsor)"))
}

/// `AS64496` (any case) as an AS number; `None` for anything else (an address, a CIDR).
pub fn parse_asn(text: &str) -> Option<u32> {
    let text = text.trim();
    let digits = text
        .get(..2)
        .filter(|p| p.eq_ignore_ascii_case("as"))
        .map(|_| &text[2..])?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// An address prints bare, a range with its prefix.
pub fn net_text(net: &IpNet) -> String {
    if net.prefix_len() == net.max_prefix_len() {
        net.addr().to_string()
    } else {
        net.to_string()
    }
}

/// A CIDR wider than a lockout may be (IPv4 /8, IPv6 /16): deny-list material.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooWide {
    pub net: IpNet,
    pub min: u8,
}

impl std::fmt::Display for TooWide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is wider than a lockout may be (at least /{}); use the deny list for wider ranges",
            self.net, self.min
        )
    }
}

impl std::error::Error for TooWide {}

/// `net` in its one spelling, if a lockout may cover it. An IPv4-mapped CIDR is bounded as the
/// IPv4 CIDR it is (`::ffff:0:0/96` is all of IPv4).
pub fn lockable(net: IpNet) -> Result<IpNet, TooWide> {
    let net = canonical_net(net);
    let min = match net {
        IpNet::V4(_) => MIN_V4_PREFIX,
        IpNet::V6(_) => MIN_V6_PREFIX,
    };
    if net.prefix_len() < min {
        return Err(TooWide { net, min });
    }
    Ok(net)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_inputs_are_named() {
        assert!(parse_ip("10.0.0.300").unwrap_err().contains("10.0.0.300"));
        assert!(parse_cidr("10.0.0.0/33")
            .unwrap_err()
            .contains("not a CIDR"));
        assert!(parse_cidr("10.0.0.1/8").unwrap_err().contains("10.0.0.0/8"));
        assert!(parse_cidr("::/16").unwrap_err().contains("::ffff:0:0/96"));
        assert!(parse_duration("soon").unwrap_err().contains("soon"));
        assert!(parse_duration("0s")
            .unwrap_err()
            .contains("longer than zero"));
        assert!(parse_duration("999999999h")
            .unwrap_err()
            .contains("at most 3650 days"));
        assert_eq!(parse_duration("3650d").unwrap(), MAX_DURATION);
        // Through humantime `10M` was ten months and `1y` a year.
        for typo in ["10M", "1y", "5min", "1 hour", "2H"] {
            let err = parse_duration(typo).unwrap_err();
            assert!(err.contains(typo) && err.contains("s, m, h, d, w"), "{err}");
        }
        assert!(parse_tier("gold").unwrap_err().contains("not a tier"));
        let wide = lockable("10.0.0.0/7".parse().unwrap()).unwrap_err();
        assert!(wide.to_string().contains("at least /8"), "{wide}");
    }

    #[test]
    fn good_inputs_parse() {
        assert_eq!(parse_ip(" ::ffff:1.2.3.4 ").unwrap().to_string(), "1.2.3.4");
        assert_eq!(
            parse_cidr("::ffff:203.0.113.0/120").unwrap().to_string(),
            "203.0.113.0/24"
        );
        assert_eq!(
            parse_cidr("::ffff:0:0/96").unwrap().to_string(),
            "0.0.0.0/0"
        );
        assert_eq!(parse_cidr("192.0.2.7").unwrap().to_string(), "192.0.2.7/32");
        assert_eq!(
            parse_cidr("2001:db8::/48").unwrap().to_string(),
            "2001:db8::/48"
        );
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_tier("agent"), Ok(Tier::Agent));
        assert_eq!(net_text(&"192.0.2.7/32".parse().unwrap()), "192.0.2.7");
        assert_eq!(net_text(&"192.0.2.0/24".parse().unwrap()), "192.0.2.0/24");
        assert_eq!(
            lockable("::ffff:10.0.0.0/104".parse().unwrap()),
            Ok("10.0.0.0/8".parse().unwrap())
        );
    }

    #[test]
    fn as_numbers_parse_in_either_case_and_nothing_else_does() {
        assert_eq!(parse_asn("AS64496"), Some(64496));
        assert_eq!(parse_asn("as13335"), Some(13335));
        assert_eq!(parse_asn("As15169"), Some(15169));
        assert_eq!(parse_asn("aS1"), Some(1));
        for not in [
            "AS",
            "AS-1",
            "AS1.5",
            "198.51.100.0/24",
            "64496",
            "AS99999999999",
        ] {
            assert_eq!(parse_asn(not), None, "{not}");
        }
    }
}
