//! Lists of addresses and networks in the config (`trusted_proxies`, `allow_internal`,
//! `allow_private_sources`): each entry a CIDR or a bare address (exactly that host), an
//! entry that is neither an error naming the list's field (and so its line).

use ipnet::IpNet;

use super::error::ConfigError;

/// `list` read as networks, in order.
pub fn parse(field: &str, list: &[String]) -> Result<Vec<IpNet>, ConfigError> {
    list.iter()
        .map(|s| {
            s.parse::<IpNet>()
                .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    ConfigError::invalid(
                        field.to_string(),
                        format!("{s:?} is not an address or CIDR"),
                    )
                })
        })
        .collect()
}
