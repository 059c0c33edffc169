//! The `[http]` section: where the three HTTP surfaces listen, the upstream the proxy forwards
//! to, its timeouts, the bounds on held (delayed) requests, header limits, the peers trusted to
//! say who the client is (`X-Real-IP` on `/v1/auth`). Upgrade paths named in 429s live in `[upgrade]`.
//!
//! Two stages, like every section: [`RawHttp`] mirrors the file, [`HttpSettings`] holds checked
//! values, validated once with the rest of the file ([`super::file::Config::http`]). Every
//! error names the field; the whole-file load adds the line.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

use super::api_token::ApiToken;
use super::ConfigError;
use crate::model::duration_text::{self, Units};

/// `[http]` as written in the file; every field optional with a documented default.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttp {
    /// Reverse-proxy listeners (default: none; needs `upstream`).
    pub proxy_listen: Option<Vec<String>>,
    /// Reverse-proxy listeners that terminate TLS with the `[[http.tls]]` certificates
    /// (default: none; needs `upstream` and at least one `[[http.tls]]`).
    pub tls_listen: Option<Vec<String>>,
    /// The certificates of `tls_listen`, chosen by SNI (see [`super::tls`]).
    pub tls: Option<Vec<super::tls::RawTls>>,
    /// Decision API + nginx `auth_request` listeners (default: none; e.g. `127.0.0.1:8081`).
    pub api_listen: Option<Vec<String>>,
    /// Envoy's gRPC services, ext_authz and rate limit (default: none; e.g. `127.0.0.1:8082`).
    pub grpc_listen: Option<Vec<String>>,
    /// The `ShouldRateLimit` descriptor key carrying the route path (default `path`).
    pub grpc_route_key: Option<String>,
    /// Where the proxy forwards: `http://host:port` (plain HTTP, no path).
    pub upstream: Option<String>,
    /// Time allowed to open a TCP connection to the upstream (default 2s) → 502 past it.
    pub connect_timeout: Option<String>,
    /// Time allowed for the upstream's response head (default 30s) → 504 past it.
    pub response_timeout: Option<String>,
    /// Idle keep-alive connections to the upstream are closed after this (default 90s).
    pub pool_idle_timeout: Option<String>,
    /// Idle keep-alive connections kept to the upstream (default 256).
    pub pool_max_idle: Option<usize>,
    /// Connections open to the upstream at once, per proxy thread, both client paths
    /// (default 256); past it requests wait in line, within `response_timeout`.
    pub upstream_max_connections: Option<usize>,
    /// Requests held for a scan delay at once, over all callers (default 10000).
    pub max_held: Option<usize>,
    /// Requests held for a scan delay at once for one identity (default 8).
    pub max_held_per_identity: Option<usize>,
    /// Tunnels (upgraded connections: WebSocket) open at once, over all callers (default
    /// 10000); one more upgrade is answered 503 with `Retry-After`.
    pub max_tunnels: Option<usize>,
    /// Tunnels open at once for one identity (default 16) → 503 past it.
    pub max_tunnels_per_identity: Option<usize>,
    /// A tunnel that moved no byte either way for this long is closed (default 300s).
    pub tunnel_idle_timeout: Option<String>,
    /// Most request header fields accepted (default 64) → 431 past it.
    pub max_header_count: Option<usize>,
    /// Most bytes of request header fields accepted, names + values (default 16384) → 431.
    pub max_header_bytes: Option<usize>,
    /// Most bytes of a `/v1/decide` body (default 65536, or twice `max_header_bytes` when that
    /// is larger) → 413.
    pub api_max_body: Option<usize>,
    /// Time allowed for a client to send its request head, on every listener (proxy, API,
    /// admin, metrics), counted from the connection's start or the previous response: an idle
    /// keep-alive connection is closed then too (default 30s).
    pub header_read_timeout: Option<String>,
    /// Time allowed for a request body on the API, admin and metrics listeners, counted from
    /// its head (default 10s) → 408 and the connection closed.
    pub body_read_timeout: Option<String>,
    // Connection bounds (issue 35, D1/D3): kept in one block. The defaults are derived from the
    // process's descriptor limit at start (`crate::edge::listen::budget`).
    /// Connections open at once on each API, admin, metrics and gRPC listener (default: a
    /// sixteenth of the descriptors left after a reserve, at most 1024); one more is refused
    /// at once.
    pub api_max_connections: Option<usize>,
    /// Connections open at once over all proxy listeners, `proxy_listen` and `tls_listen`
    /// together (default: half the descriptors left after a reserve); one more is closed at
    /// once.
    pub max_connections: Option<usize>,
    /// Connections open at once from one client address on the proxy listeners (default: an
    /// eighth of `max_connections`, at most 1024). A `trusted_proxies` peer is not one client:
    /// its connections are not counted, or counted by the address its PROXY header names.
    pub max_connections_per_client: Option<usize>,
    /// Peers whose client field (`X-Real-IP`, `X-Forwarded-For`) is believed on `/v1/auth`
    /// (CIDRs; default loopback only).
    pub trusted_peers: Option<Vec<String>>,
    /// Base URI of problem `type`s; the reason is appended (default: `about:blank`, no base).
    pub problem_type_base: Option<String>,
    /// On shutdown, how long in-flight (and held) requests may finish (default 10s).
    pub shutdown_grace: Option<String>,
    /// Threads of the daemon's async runtime, which serves every listener (default: one per
    /// CPU).
    pub worker_threads: Option<usize>,
    /// PROXY protocol on the proxy listeners: "off" (default), "optional", "required"; only
    /// from `[identity] trusted_proxies`.
    pub proxy_protocol: Option<String>,
    /// HTTP/2 on the proxy listeners (default true); see [`super::h2`].
    pub http2: Option<bool>,
    /// Streams open at once on one HTTP/2 connection (default 100).
    pub h2_max_concurrent_streams: Option<u32>,
    /// PING after this long without a frame (default 30s). Answering it does not keep an idle
    /// connection: `header_read_timeout` closes it.
    pub h2_keep_alive_interval: Option<String>,
    /// Close when a PING is not answered within this (default 10s).
    pub h2_keep_alive_timeout: Option<String>,
    /// File holding the bearer token `/v1/decide` and `/v1/auth` require (default: none, no
    /// token asked; off loopback set one). See [`super::api_token`].
    pub api_token_file: Option<std::path::PathBuf>,
    /// Path on the proxy where callers read their own limits, answered by the daemon, never
    /// forwarded or counted (default `/.well-known/rate-limits`; `""` turns it off).
    pub self_service_path: Option<String>,
    /// Refused: the admin API is configured in `[admin]` (a table here was once accepted and
    /// ignored, which left operators believing they had configured it).
    pub admin: Option<toml::Table>,
}

/// The validated `[http]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpSettings {
    pub proxy_listen: Vec<SocketAddr>,
    pub tls_listen: Vec<SocketAddr>,
    pub tls: Vec<super::tls::TlsCert>,
    pub api_listen: Vec<SocketAddr>,
    /// `grpc_listen` and `grpc_route_key` (see [`super::grpc`]).
    pub grpc: super::grpc::GrpcSettings,
    pub upstream: Option<Upstream>,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    pub pool_idle_timeout: Duration,
    pub pool_max_idle: usize,
    pub upstream_max_connections: NonZeroUsize,
    pub max_held: NonZeroUsize,
    pub max_held_per_identity: NonZeroUsize,
    pub max_tunnels: NonZeroUsize,
    pub max_tunnels_per_identity: NonZeroUsize,
    pub tunnel_idle_timeout: Duration,
    pub max_header_count: NonZeroUsize,
    pub max_header_bytes: NonZeroUsize,
    /// Ceiling on a `/v1/decide` body (see [`api_max_body`]).
    pub api_max_body: NonZeroUsize,
    pub header_read_timeout: Duration,
    /// Time for a body on the API, admin and metrics listeners, from its head.
    pub body_read_timeout: Duration,
    // Connection bounds (issue 35, D1/D3): kept in one block. `None`: derived from the
    // descriptor limit when the listeners start (`crate::edge::listen::budget`).
    /// Connections open at once on each API, admin, metrics and gRPC listener.
    pub api_max_connections: Option<NonZeroUsize>,
    /// Connections open at once over all proxy listeners.
    pub max_connections: Option<NonZeroUsize>,
    /// Connections open at once from one client address on the proxy listeners.
    pub max_connections_per_client: Option<NonZeroUsize>,
    /// `[identity] ipv6_prefix`, copied like `proxy_protocol_peers`: IPv6 clients are counted
    /// per prefix by `max_connections_per_client` too (64 from [`HttpSettings::from_toml`]).
    pub client_ipv6_prefix: u8,
    pub trusted_peers: Vec<IpNet>,
    pub problem_type_base: Option<String>,
    pub shutdown_grace: Duration,
    /// `None`: one per CPU.
    pub worker_threads: Option<NonZeroUsize>,
    pub proxy_protocol: super::proxy_protocol::ProxyProtocol,
    /// Peers whose PROXY header is believed: `[identity] trusted_proxies`, copied here when the
    /// whole file is read (empty from [`HttpSettings::from_toml`]).
    pub proxy_protocol_peers: Vec<IpNet>,
    /// `[overload]`, copied here like `proxy_protocol_peers` (off from [`HttpSettings::from_toml`]).
    pub overload: super::overload::OverloadSettings,
    /// HTTP/2 on the proxy listeners.
    pub h2: super::h2::H2Settings,
    /// `None`: `/v1/decide` and `/v1/auth` ask for no token.
    pub api_token: Option<ApiToken>,
    /// `None`: no self-service endpoint (the path is forwarded like any other).
    pub self_service_path: Option<String>,
}

/// Where callers read their own limits when `[http] self_service_path` is absent.
pub const DEFAULT_SELF_SERVICE_PATH: &str = "/.well-known/rate-limits";

fn self_service_path(value: Option<String>) -> Result<Option<String>, ConfigError> {
    let path = value.unwrap_or_else(|| DEFAULT_SELF_SERVICE_PATH.to_string());
    if path.is_empty() {
        return Ok(None);
    }
    // Compared with the request's path as it arrives (no query, not decoded).
    if !path.starts_with('/')
        || path
            .bytes()
            .any(|b| !b.is_ascii_graphic() || b == b'?' || b == b'#')
    {
        return Err(ConfigError::invalid(
            "http.self_service_path",
            format!("{path:?} must be an absolute path without query (e.g. \"/.well-known/rate-limits\"), or \"\" to turn it off"),
        ));
    }
    Ok(Some(path))
}

/// The upstream origin: scheme `http`, a host and a port (the proxy keeps the request's path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    /// `host:port` as written (a name is resolved per connection by the pooled client).
    pub authority: http::uri::Authority,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings::validate(RawHttp::default()).expect("defaults are valid")
    }
}

fn duration(
    field: &str,
    value: Option<String>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match value {
        None => Ok(default),
        Some(s) => {
            let d = duration_text::parse(&s, Units::Config)
                .map_err(|e| ConfigError::invalid(field, e.to_string()))?;
            if d.is_zero() {
                return Err(ConfigError::invalid(field, "must be longer than zero"));
            }
            Ok(d)
        }
    }
}

fn non_zero(
    field: &str,
    value: Option<usize>,
    default: usize,
) -> Result<NonZeroUsize, ConfigError> {
    NonZeroUsize::new(value.unwrap_or(default))
        .ok_or_else(|| ConfigError::invalid(field, "must be at least 1"))
}

/// A count that, when absent, is derived at start (`None`); present, it must be at least 1.
fn optional_non_zero(
    field: &str,
    value: Option<usize>,
) -> Result<Option<NonZeroUsize>, ConfigError> {
    value
        .map(|n| {
            NonZeroUsize::new(n).ok_or_else(|| ConfigError::invalid(field, "must be at least 1"))
        })
        .transpose()
}

fn addrs(
    field: &str,
    value: Option<Vec<String>>,
    default: &[&str],
) -> Result<Vec<SocketAddr>, ConfigError> {
    let list = value.unwrap_or_else(|| default.iter().map(|s| s.to_string()).collect());
    list.iter()
        .map(|s| {
            s.parse::<SocketAddr>().map_err(|_| {
                ConfigError::invalid(
                    field,
                    format!("{s:?} is not an address:port (e.g. \"127.0.0.1:8080\")"),
                )
            })
        })
        .collect()
}

/// Ceiling on `http.max_header_count`. An `http::HeaderMap` holds at most 24,576 fields and
/// panics past that, and hyper's parser is given twice the configured count; this keeps both
/// far inside their bounds whatever the file says.
pub const MAX_HEADER_COUNT: usize = 8192;

/// Ceiling on `http.api_max_body`. A `/v1/decide` body in flight costs about twice its size
/// (the buffer, then the header map built from it), so this bounds what one request can pin.
pub const MAX_API_BODY: usize = 16 * 1024 * 1024;

/// `http.api_max_body`: by default 64 KiB, four times the default `max_header_bytes` (16 KiB),
/// so a request with every field the proxy accepts fits with room for JSON quoting, while 16
/// concurrent maximal bodies pin a few MiB, not the hundreds a 2 MiB limit allowed. A larger `max_header_bytes` raises the default to
/// twice its size, so the API can always describe a request the proxy would accept; an explicit
/// value below `max_header_bytes` could not, and is refused.
fn api_max_body(
    value: Option<usize>,
    max_header_bytes: NonZeroUsize,
) -> Result<NonZeroUsize, ConfigError> {
    const FIELD: &str = "http.api_max_body";
    let Some(n) = value else {
        let n = (64 * 1024).max(max_header_bytes.get().saturating_mul(2));
        return NonZeroUsize::new(n.min(MAX_API_BODY))
            .ok_or_else(|| ConfigError::invalid(FIELD, "must be at least 1"));
    };
    if n < max_header_bytes.get() {
        return Err(ConfigError::invalid(
            FIELD,
            format!(
                "{n} is less than http.max_header_bytes ({max_header_bytes}): a body could not \
                 describe a request the proxy accepts"
            ),
        ));
    }
    if n > MAX_API_BODY {
        return Err(ConfigError::invalid(
            FIELD,
            format!("{n} is more than the {MAX_API_BODY} supported"),
        ));
    }
    NonZeroUsize::new(n).ok_or_else(|| ConfigError::invalid(FIELD, "must be at least 1"))
}

impl HttpSettings {
    pub fn validate(raw: RawHttp) -> Result<Self, ConfigError> {
        if raw.admin.is_some() {
            return Err(ConfigError::invalid(
                "http.admin",
                "the admin API is configured in its own section: move this table to `[admin]` \
                 (fields `listen`, `token_file`)",
            ));
        }
        let upstream = match raw.upstream {
            None => None,
            Some(s) => {
                let uri: http::Uri = s
                    .parse()
                    .map_err(|e| ConfigError::invalid("http.upstream", format!("{s:?}: {e}")))?;
                if uri.scheme_str() != Some("http") {
                    return Err(ConfigError::invalid(
                        "http.upstream",
                        format!("{s:?}: only http:// upstreams are supported"),
                    ));
                }
                if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
                    return Err(ConfigError::invalid(
                        "http.upstream",
                        format!(
                            "{s:?}: give only scheme, host and port; the request's path is kept"
                        ),
                    ));
                }
                let authority = uri.authority().cloned().ok_or_else(|| {
                    ConfigError::invalid("http.upstream", format!("{s:?}: no host"))
                })?;
                Some(Upstream { authority })
            }
        };
        let proxy_listen = addrs("http.proxy_listen", raw.proxy_listen, &[])?;
        if !proxy_listen.is_empty() && upstream.is_none() {
            return Err(ConfigError::invalid(
                "http.upstream",
                "required when http.proxy_listen is set (where should the proxy forward?)",
            ));
        }
        let tls_listen = addrs("http.tls_listen", raw.tls_listen, &[])?;
        let tls = super::tls::validate(raw.tls)?;
        if !tls_listen.is_empty() && upstream.is_none() {
            return Err(ConfigError::invalid(
                "http.upstream",
                "required when http.tls_listen is set (where should the proxy forward?)",
            ));
        }
        if !tls_listen.is_empty() && tls.is_empty() {
            return Err(ConfigError::invalid(
                "http.tls",
                "at least one [[http.tls]] entry (cert_file, key_file) is needed by http.tls_listen",
            ));
        }
        let trusted_peers = raw
            .trusted_peers
            .unwrap_or_else(|| vec!["127.0.0.0/8".into(), "::1/128".into()])
            .iter()
            .map(|s| {
                s.parse::<IpNet>()
                    .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
                    .map(crate::model::address::canonical_net)
                    .map_err(|_| {
                        ConfigError::invalid(
                            "http.trusted_peers",
                            format!("{s:?} is not an IP or CIDR"),
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let max_held = non_zero("http.max_held", raw.max_held, 10_000)?;
        let max_held_per_identity =
            non_zero("http.max_held_per_identity", raw.max_held_per_identity, 8)?;
        if max_held_per_identity > max_held {
            return Err(ConfigError::invalid(
                "http.max_held_per_identity",
                format!("{max_held_per_identity} is more than http.max_held ({max_held})"),
            ));
        }
        let max_tunnels = non_zero("http.max_tunnels", raw.max_tunnels, 10_000)?;
        let max_tunnels_per_identity = non_zero(
            "http.max_tunnels_per_identity",
            raw.max_tunnels_per_identity,
            16,
        )?;
        if max_tunnels_per_identity > max_tunnels {
            return Err(ConfigError::invalid(
                "http.max_tunnels_per_identity",
                format!("{max_tunnels_per_identity} is more than http.max_tunnels ({max_tunnels})"),
            ));
        }
        let max_connections = optional_non_zero("http.max_connections", raw.max_connections)?;
        let max_connections_per_client = optional_non_zero(
            "http.max_connections_per_client",
            raw.max_connections_per_client,
        )?;
        if let (Some(all), Some(one)) = (max_connections, max_connections_per_client) {
            if one > all {
                return Err(ConfigError::invalid(
                    "http.max_connections_per_client",
                    format!("{one} is more than http.max_connections ({all})"),
                ));
            }
        }
        let max_header_count = non_zero("http.max_header_count", raw.max_header_count, 64)?;
        if max_header_count.get() > MAX_HEADER_COUNT {
            return Err(ConfigError::invalid(
                "http.max_header_count",
                format!("{max_header_count} is more than the {MAX_HEADER_COUNT} supported"),
            ));
        }
        let max_header_bytes = non_zero("http.max_header_bytes", raw.max_header_bytes, 16 * 1024)?;
        let problem_type_base = match raw.problem_type_base {
            None => None,
            Some(b)
                if b.starts_with("https://") || b.starts_with("http://") || b.starts_with('/') =>
            {
                Some(b)
            }
            Some(b) => {
                return Err(ConfigError::invalid(
                    "http.problem_type_base",
                    format!("{b:?} must be an http(s) URL or an absolute path"),
                ))
            }
        };
        Ok(HttpSettings {
            proxy_listen,
            tls_listen,
            tls,
            api_listen: addrs("http.api_listen", raw.api_listen, &[])?,
            grpc: super::grpc::GrpcSettings::validate(
                addrs("http.grpc_listen", raw.grpc_listen, &[])?,
                raw.grpc_route_key,
            )?,
            upstream,
            connect_timeout: duration(
                "http.connect_timeout",
                raw.connect_timeout,
                Duration::from_secs(2),
            )?,
            response_timeout: duration(
                "http.response_timeout",
                raw.response_timeout,
                Duration::from_secs(30),
            )?,
            pool_idle_timeout: duration(
                "http.pool_idle_timeout",
                raw.pool_idle_timeout,
                Duration::from_secs(90),
            )?,
            pool_max_idle: raw.pool_max_idle.unwrap_or(256),
            upstream_max_connections: non_zero(
                "http.upstream_max_connections",
                raw.upstream_max_connections,
                256,
            )?,
            max_held,
            max_held_per_identity,
            max_tunnels,
            max_tunnels_per_identity,
            tunnel_idle_timeout: duration(
                "http.tunnel_idle_timeout",
                raw.tunnel_idle_timeout,
                Duration::from_secs(300),
            )?,
            max_header_count,
            max_header_bytes,
            api_max_body: api_max_body(raw.api_max_body, max_header_bytes)?,
            header_read_timeout: duration(
                "http.header_read_timeout",
                raw.header_read_timeout,
                Duration::from_secs(30),
            )?,
            body_read_timeout: duration(
                "http.body_read_timeout",
                raw.body_read_timeout,
                Duration::from_secs(10),
            )?,
            api_max_connections: optional_non_zero(
                "http.api_max_connections",
                raw.api_max_connections,
            )?,
            max_connections,
            max_connections_per_client,
            client_ipv6_prefix: 64,
            trusted_peers,
            problem_type_base,
            worker_threads: raw
                .worker_threads
                .map(|n| {
                    NonZeroUsize::new(n).ok_or_else(|| {
                        ConfigError::invalid("http.worker_threads", "must be at least 1")
                    })
                })
                .transpose()?,
            api_token: raw
                .api_token_file
                .as_deref()
                .map(ApiToken::read)
                .transpose()?,
            self_service_path: self_service_path(raw.self_service_path)?,
            proxy_protocol: super::proxy_protocol::ProxyProtocol::parse(
                raw.proxy_protocol.as_deref(),
            )?,
            proxy_protocol_peers: Vec::new(),
            overload: Default::default(),
            h2: super::h2::H2Settings::validate(super::h2::RawH2 {
                http2: raw.http2,
                h2_max_concurrent_streams: raw.h2_max_concurrent_streams,
                h2_keep_alive_interval: raw
                    .h2_keep_alive_interval
                    .map(|s| duration("http.h2_keep_alive_interval", Some(s), Duration::ZERO))
                    .transpose()?,
                h2_keep_alive_timeout: raw
                    .h2_keep_alive_timeout
                    .map(|s| duration("http.h2_keep_alive_timeout", Some(s), Duration::ZERO))
                    .transpose()?,
            })?,
            shutdown_grace: duration(
                "http.shutdown_grace",
                raw.shutdown_grace,
                Duration::from_secs(10),
            )?,
        })
    }

    /// Parses and validates an `[http]` table given as TOML text (the section's body), through
    /// the same [`HttpSettings::validate`] the whole file uses; a convenience for tests and
    /// benches. Errors name the field but not the line: the file is
    /// [`super::file::Config::load`]'s.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let raw: RawHttp = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: "[http]".into(),
            line: None,
            field: None,
            message: e.to_string(),
        })?;
        HttpSettings::validate(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        HttpSettings::from_toml(text).unwrap_err().to_string()
    }

    #[test]
    fn defaults_listen_nowhere() {
        // Nothing is bound unless configured: a kernel-only daemon opens no HTTP port.
        let s = HttpSettings::default();
        assert!(s.proxy_listen.is_empty());
        assert!(s.api_listen.is_empty());
        assert_eq!(s.max_held_per_identity.get(), 8);
        assert_eq!(s.upstream_max_connections.get(), 256);
        assert_eq!(
            s.self_service_path.as_deref(),
            Some(DEFAULT_SELF_SERVICE_PATH)
        );
        assert!(s.api_token.is_none());
        let off = HttpSettings::from_toml("self_service_path = \"\"").unwrap();
        assert_eq!(off.self_service_path, None);
    }

    #[test]
    fn proxy_without_upstream_names_upstream() {
        assert!(err("proxy_listen = [\"127.0.0.1:0\"]").contains("http.upstream"));
    }

    #[test]
    fn bad_values_name_their_field() {
        assert!(err("upstream = \"https://x:1\"").contains("http.upstream"));
        assert!(err("upstream = \"http://x:1/app\"").contains("http.upstream"));
        assert!(err("api_listen = [\"localhost\"]").contains("http.api_listen"));
        assert!(err("grpc_listen = [\"localhost\"]").contains("http.grpc_listen"));
        assert!(err("grpc_route_key = \"\"").contains("http.grpc_route_key"));
        assert!(err("connect_timeout = \"soon\"").contains("http.connect_timeout"));
        assert!(err("response_timeout = \"0s\"").contains("http.response_timeout"));
        assert!(err("max_held = 0").contains("http.max_held"));
        assert!(err("upstream_max_connections = 0").contains("http.upstream_max_connections"));
        assert!(
            err("max_held = 2\nmax_held_per_identity = 3").contains("http.max_held_per_identity")
        );
        assert!(err("trusted_peers = [\"10.0.0.0/33\"]").contains("http.trusted_peers"));
        assert!(err("problem_type_base = \"x\"").contains("http.problem_type_base"));
        assert!(err("max_header_count = 100000").contains("http.max_header_count"));
        assert!(err("api_max_body = 1024").contains("http.api_max_body"));
        assert!(err("api_max_body = 0").contains("http.api_max_body"));
        assert!(err("api_max_body = 100000000").contains("http.api_max_body"));
        assert!(err("self_service_path = \"limits\"").contains("http.self_service_path"));
        assert!(err("self_service_path = \"/a?b\"").contains("http.self_service_path"));
        assert!(err("api_token_file = \"/nonexistent/t\"").contains("http.api_token_file"));
        assert!(err("body_read_timeout = \"0s\"").contains("http.body_read_timeout"));
        assert!(err("api_max_connections = 0").contains("http.api_max_connections"));
        assert!(err("max_connections = 0").contains("http.max_connections"));
        assert!(err("max_connections_per_client = 0").contains("http.max_connections_per_client"));
        assert!(err("max_connections = 5\nmax_connections_per_client = 6")
            .contains("http.max_connections_per_client"));
    }

    #[test]
    fn api_body_limit_covers_the_header_limit() {
        assert_eq!(HttpSettings::default().api_max_body.get(), 64 * 1024);
        let big = HttpSettings::from_toml("max_header_bytes = 65536").unwrap();
        assert_eq!(big.api_max_body.get(), 128 * 1024);
        let set = HttpSettings::from_toml("api_max_body = 20000").unwrap();
        assert_eq!(set.api_max_body.get(), 20_000);
    }

    #[test]
    fn unknown_field_is_an_error() {
        assert!(HttpSettings::from_toml("upstrem = \"http://x:1\"").is_err());
    }

    #[test]
    fn upstream_keeps_authority() {
        let s = HttpSettings::from_toml(
            "proxy_listen = [\"127.0.0.1:0\"]\nupstream = \"http://127.0.0.1:9000\"",
        )
        .unwrap();
        assert_eq!(s.upstream.unwrap().authority.as_str(), "127.0.0.1:9000");
        let bare = HttpSettings::from_toml("trusted_peers = [\"10.1.2.3\"]").unwrap();
        assert_eq!(
            bare.trusted_peers,
            vec!["10.1.2.3/32".parse::<IpNet>().unwrap()]
        );
    }

    /// Issue 21, P8: a mapped CIDR in an address list is the IPv4 CIDR (a peer is compared as
    /// IPv4, so `::ffff:10.0.0.0/104` used to trust nobody).
    #[test]
    fn mapped_trusted_peers_are_ipv4() {
        let s = HttpSettings::from_toml(
            "trusted_peers = [\"::ffff:10.0.0.0/104\", \"::ffff:192.0.2.9\"]",
        )
        .unwrap();
        assert_eq!(
            s.trusted_peers,
            vec![
                "10.0.0.0/8".parse::<IpNet>().unwrap(),
                "192.0.2.9/32".parse().unwrap()
            ]
        );
    }
}
