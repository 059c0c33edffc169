//! `[http] grpc_listen` and `grpc_route_key`: where Envoy's gRPC services listen (ext_authz
//! `Check` and the rate-limit service's `ShouldRateLimit`, see `crate::surfaces::grpc`), and which
//! `ShouldRateLimit` descriptor entry carries the route path.
//!
//! Off unless listed, like `api_listen`; loopback is the place for it unless
//! `api_token_file` is set (the same token guards it, and `check-config` warns the same way).

use std::net::SocketAddr;

use super::ConfigError;

/// The descriptor key that names the route when `grpc_route_key` is absent: Envoy's
/// `request_headers` action with `header_name: ":path"`, `descriptor_key: "path"`.
pub const DEFAULT_ROUTE_KEY: &str = "path";

/// Descriptor keys with a fixed meaning, which the route key may not take.
pub const REMOTE_ADDRESS_KEY: &str = "remote_address";
pub const METHOD_KEY: &str = "method";

/// The validated gRPC settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrpcSettings {
    /// Empty: no gRPC listener.
    pub listen: Vec<SocketAddr>,
    /// The `ShouldRateLimit` descriptor key whose value is the route path.
    pub route_key: String,
}

impl Default for GrpcSettings {
    fn default() -> Self {
        GrpcSettings {
            listen: Vec::new(),
            route_key: DEFAULT_ROUTE_KEY.to_string(),
        }
    }
}

impl GrpcSettings {
    /// `listen` already parsed as addresses (named `http.grpc_listen` in its errors).
    pub fn validate(
        listen: Vec<SocketAddr>,
        route_key: Option<String>,
    ) -> Result<Self, ConfigError> {
        const FIELD: &str = "http.grpc_route_key";
        let route_key = route_key.unwrap_or_else(|| DEFAULT_ROUTE_KEY.to_string());
        if route_key.is_empty() || !route_key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ConfigError::invalid(
                FIELD,
                format!(
                    "{route_key:?} must be a descriptor key (printable ASCII, no spaces), e.g. \
                     \"path\""
                ),
            ));
        }
        if route_key == REMOTE_ADDRESS_KEY || route_key == METHOD_KEY {
            return Err(ConfigError::invalid(
                FIELD,
                format!("{route_key:?} already names the caller's address or method"),
            ));
        }
        Ok(GrpcSettings { listen, route_key })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_key_is_checked() {
        let ok = GrpcSettings::validate(Vec::new(), None).unwrap();
        assert_eq!(ok.route_key, "path");
        assert!(ok.listen.is_empty());
        for bad in ["", "a b", "remote_address", "method"] {
            let e = GrpcSettings::validate(Vec::new(), Some(bad.into())).unwrap_err();
            assert!(e.to_string().contains("http.grpc_route_key"), "{bad}: {e}");
        }
        let own = GrpcSettings::validate(Vec::new(), Some("route".into())).unwrap();
        assert_eq!(own.route_key, "route");
    }
}
