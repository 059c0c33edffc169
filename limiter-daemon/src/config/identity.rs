//! `[identity]`: how the client IP is found (trusted proxies, which forwarding header, IPv6
//! grouping) and which cookie marks a session.

use ipnet::IpNet;
use serde::Deserialize;

use super::ConfigError;

/// Which header a trusted proxy uses to pass the client address on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1`.
    Forwarded,
}

impl ForwardedHeader {
    pub fn as_str(self) -> &'static str {
        match self {
            ForwardedHeader::XForwardedFor => "x-forwarded-for",
            ForwardedHeader::Forwarded => "forwarded",
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIdentity {
    pub trusted_proxies: Option<Vec<String>>,
    pub forwarded_header: Option<ForwardedHeader>,
    pub ipv6_prefix: Option<u8>,
    pub session_cookie: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentitySettings {
    /// Peers whose forwarding headers are believed; everyone else's are ignored.
    pub trusted_proxies: Vec<IpNet>,
    pub forwarded_header: ForwardedHeader,
    /// IPv6 clients are counted per this prefix (default /64).
    pub ipv6_prefix: u8,
    /// Presence of this cookie makes a session caller.
    pub session_cookie: String,
}

impl IdentitySettings {
    pub fn validate(raw: RawIdentity) -> Result<Self, ConfigError> {
        let trusted: Vec<IpNet> = super::nets::parse(
            "identity.trusted_proxies",
            &raw.trusted_proxies.unwrap_or_default(),
        )?
        .into_iter()
        .map(crate::model::address::canonical_net)
        .collect();
        let ipv6_prefix = raw.ipv6_prefix.unwrap_or(64);
        if ipv6_prefix == 0 || ipv6_prefix > 128 {
            return Err(ConfigError::invalid(
                "identity.ipv6_prefix",
                format!("{ipv6_prefix} is not between 1 and 128"),
            ));
        }
        let session_cookie = raw.session_cookie.unwrap_or_else(|| "session".to_string());
        if session_cookie.is_empty()
            || !session_cookie
                .bytes()
                .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b))
        {
            return Err(ConfigError::invalid(
                "identity.session_cookie",
                format!("{session_cookie:?} is not a cookie name"),
            ));
        }
        Ok(IdentitySettings {
            trusted_proxies: trusted,
            forwarded_header: raw
                .forwarded_header
                .unwrap_or(ForwardedHeader::XForwardedFor),
            ipv6_prefix,
            session_cookie,
        })
    }
}
