//! `[http] proxy_protocol`: whether the proxy listeners read a PROXY protocol header (v1 or v2)
//! ahead of each connection's bytes (see `crate::edge::listen::proxy_protocol`).

use super::error::ConfigError;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProxyProtocol {
    /// No header is read; one would be an invalid request.
    #[default]
    Off,
    /// A trusted proxy's connection may start with one (health checks may not).
    Optional,
    /// A trusted proxy's connection must start with one.
    Required,
}

impl ProxyProtocol {
    pub fn parse(value: Option<&str>) -> Result<Self, ConfigError> {
        match value {
            None | Some("off") => Ok(ProxyProtocol::Off),
            Some("optional") => Ok(ProxyProtocol::Optional),
            Some("required") => Ok(ProxyProtocol::Required),
            Some(other) => Err(ConfigError::invalid(
                "http.proxy_protocol",
                format!("{other:?} is not \"off\", \"optional\" or \"required\""),
            )),
        }
    }
}
