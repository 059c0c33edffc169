//! The networks a caller is also metered as (`[networks]`): its address prefix (IPv4 /24, IPv6
//! /48 by default) and, with an IP-to-ASN table, its autonomous system. A crawler spread over
//! many addresses of one network is one caller there.

use std::fmt;

use ipnet::IpNet;

use super::window::WindowState;

/// A level of network metering; each has its own burst and hourly budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NetLevel {
    /// The caller's address prefix.
    Prefix,
    /// The caller's autonomous system.
    Asn,
}

impl NetLevel {
    /// Every level, in the order a decision checks them.
    pub const ALL: [NetLevel; 2] = [NetLevel::Prefix, NetLevel::Asn];

    pub const fn index(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NetLevel::Prefix => "prefix",
            NetLevel::Asn => "asn",
        }
    }
}

/// One network, as a 429 names it: `203.0.113.0/24` or `AS64500`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NetworkName {
    Prefix(IpNet),
    Asn(u32),
}

impl NetworkName {
    pub fn level(&self) -> NetLevel {
        match self {
            NetworkName::Prefix(_) => NetLevel::Prefix,
            NetworkName::Asn(_) => NetLevel::Asn,
        }
    }
}

impl fmt::Display for NetworkName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetworkName::Prefix(net) => write!(f, "{net}"),
            NetworkName::Asn(asn) => write!(f, "AS{asn}"),
        }
    }
}

impl serde::Serialize for NetworkName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The network whose budget refused a request, and the window that refused.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NetworkState {
    pub name: NetworkName,
    pub window: WindowState,
    /// What this request's network strike locked out, each at its own escalation level: the
    /// addresses that sent in the offending burst window (`[networks] lockout = "addresses"`)
    /// or the prefix's CIDRs (`"prefix"`). Empty when this request struck nothing.
    pub locked: Vec<Locked>,
}

/// One lockout a network's strike made: an address (grouped, as a full-length prefix) or a
/// range, and its escalation level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Locked {
    pub net: IpNet,
    pub level: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_as_a_429_prints_them() {
        let net: IpNet = "203.0.113.0/24".parse().unwrap();
        assert_eq!(NetworkName::Prefix(net).to_string(), "203.0.113.0/24");
        assert_eq!(NetworkName::Asn(64500).to_string(), "AS64500");
        assert_eq!(
            serde_json::to_string(&NetworkName::Asn(7)).unwrap(),
            "\"AS7\""
        );
    }
}
