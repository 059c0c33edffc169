//! How the Valkey store reaches its server: the address (`host:port`, `redis://`, `rediss://`),
//! AUTH and the TLS CA parsed into a [`Target`] without touching the network, then connections
//! made from it: the shared multiplexed one (a standalone server behind a reconnecting
//! manager, or a cluster-async connection, detected from the server) and the stream follower's
//! own. Every connection carries a response timeout, so no call waits forever, and a refused
//! password or an untrusted certificate becomes an error naming the setting to fix.

use std::path::PathBuf;
use std::time::Duration;

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo,
    Pipeline, RedisError, RedisFuture, RedisResult, TlsCertificates, Value,
};

use crate::config::store::ValkeyPassword;
use crate::store::error::StoreError;

/// Connect timeout of every connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Response timeout of the shared connection: an admin call on a frozen server fails after
/// this; decisions have their own, shorter deadline (the engine's `decision_timeout`).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Standalone or cluster, as the server said at connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    Standalone,
    Cluster,
}

pub fn err(op: &'static str, message: impl Into<String>) -> StoreError {
    StoreError::Valkey {
        op,
        message: message.into(),
    }
}

/// Where and how to connect, checked but not yet used.
#[derive(Clone)]
pub struct Target {
    /// The address as configured, for messages (it carries no secret).
    address: String,
    info: ConnectionInfo,
    tls: Option<TlsCertificates>,
    password_setting: Option<&'static str>,
    /// Read again for every new connection, so a rotated password is picked up.
    password_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
}

/// AUTH and TLS settings of a [`Target`].
#[derive(Clone, Default)]
pub struct Access {
    pub username: Option<String>,
    pub password: Option<ValkeyPassword>,
    pub ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("address", &self.address)
            .field("tls", &self.tls.is_some())
            .field("password", &self.password_setting.map(|_| "<redacted>"))
            .finish()
    }
}

/// `host:port`, `redis://host:port[/]`, `rediss://host:port[/]` (IPv6 hosts in brackets).
fn parse_address(address: &str) -> Result<(String, u16, bool), StoreError> {
    let bad = |why: &str| {
        err(
            "connect",
            format!("store.valkey_address {address:?}: {why}"),
        )
    };
    let (rest, tls) = if let Some(r) = address.strip_prefix("rediss://") {
        (r, true)
    } else if let Some(r) = address.strip_prefix("redis://") {
        (r, false)
    } else if address.contains("://") {
        return Err(bad("the scheme must be redis:// or rediss://"));
    } else {
        (address, false)
    };
    let rest = rest.trim_end_matches('/');
    if rest.contains('@') || rest.contains('/') {
        return Err(bad(
            "give host:port only (the user and password have their own settings)",
        ));
    }
    let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad("not host:port"))?;
    let port: u16 = port.parse().map_err(|_| bad("bad port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(bad("no host"));
    }
    Ok((host.to_string(), port, tls))
}

impl Target {
    /// Parses the address and reads the CA file; no network.
    pub fn new(address: &str, access: &Access) -> Result<Target, StoreError> {
        let (host, port, tls) = parse_address(address)?;
        let addr = if tls {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host, port)
        };
        let mut info = addr
            .into_connection_info()
            .map_err(|e| err("connect", format!("store.valkey_address: {e}")))?;
        let mut redis = info.redis_settings().clone();
        if let Some(u) = &access.username {
            redis = redis.set_username(u);
        }
        if let Some(p) = &access.password {
            redis = redis.set_password(&p.value);
        }
        info = info.set_redis_settings(redis);
        let tls = match (&access.ca_file, tls) {
            (Some(_), false) => {
                return Err(err(
                    "connect",
                    "store.valkey_ca_file: only used with a rediss:// address",
                ))
            }
            (Some(path), true) => {
                let pem = std::fs::read(path).map_err(|e| {
                    err(
                        "connect",
                        format!("store.valkey_ca_file: cannot read {}: {e}", path.display()),
                    )
                })?;
                if !pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") {
                    return Err(err(
                        "connect",
                        format!(
                            "store.valkey_ca_file: {} holds no PEM certificate",
                            path.display()
                        ),
                    ));
                }
                Some(TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                })
            }
            (None, true) => Some(TlsCertificates {
                client_tls: None,
                root_cert: None,
            }),
            (None, false) => None,
        };
        Ok(Target {
            address: address.to_string(),
            info,
            tls,
            password_setting: access.password.as_ref().map(|p| p.setting),
            password_file: access.password.as_ref().and_then(|p| p.file.clone()),
            ca_file: access.ca_file.clone(),
        })
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// The connection settings with the password as the password file holds it now (a
    /// rotation is picked up by the next connection); the one read at start when the file
    /// cannot be read.
    fn info(&self) -> ConnectionInfo {
        let Some(path) = &self.password_file else {
            return self.info.clone();
        };
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let redis = self
                    .info
                    .redis_settings()
                    .clone()
                    .set_password(text.trim_end_matches(['\r', '\n']));
                self.info.clone().set_redis_settings(redis)
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "store.valkey_password_file: cannot read it again; using the password read at start");
                self.info.clone()
            }
        }
    }

    fn client(&self) -> Result<redis::Client, StoreError> {
        let info = self.info();
        match &self.tls {
            Some(certs) => redis::Client::build_with_tls(info, certs.clone()),
            None => redis::Client::open(info),
        }
        .map_err(|e| self.explain("connect", &e))
    }

    /// One plain multiplexed connection (probing, and the stream follower's own).
    pub async fn single(
        &self,
        response_timeout: Duration,
    ) -> Result<MultiplexedConnection, StoreError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(response_timeout));
        self.client()?
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| self.explain("connect", &e))
    }

    /// The shared connection: asks the server whether it is a cluster node and connects
    /// accordingly.
    pub async fn shared(&self) -> Result<(Conn, Topology), StoreError> {
        let mut probe = self.single(RESPONSE_TIMEOUT).await?;
        let info: String = redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut probe)
            .await
            .map_err(|e| self.explain("connect", &e))?;
        if info.contains("cluster_enabled:1") {
            let conn = self.cluster(RESPONSE_TIMEOUT).await?;
            return Ok((conn, Topology::Cluster));
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let manager = ConnectionManager::new_with_config(self.client()?, config)
            .await
            .map_err(|e| self.explain("connect", &e))?;
        Ok((Conn::Single(manager), Topology::Standalone))
    }

    /// A connection of its own (the stream follower's blocking reads), of the server's kind.
    pub async fn own(&self, response_timeout: Duration) -> Result<Conn, StoreError> {
        let mut probe = self.single(response_timeout).await?;
        let info: String = redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut probe)
            .await
            .map_err(|e| self.explain("connect", &e))?;
        if info.contains("cluster_enabled:1") {
            return self.cluster(response_timeout).await;
        }
        Ok(Conn::Plain(probe))
    }

    /// A cluster-async connection seeded with this node.
    pub async fn cluster(&self, response_timeout: Duration) -> Result<Conn, StoreError> {
        let mut b = ClusterClientBuilder::new(vec![self.info()])
            .connection_timeout(CONNECT_TIMEOUT)
            .response_timeout(response_timeout)
            .retries(2)
            .min_retry_wait(20)
            .max_retry_wait(500);
        if let Some(certs) = &self.tls {
            b = b.certs(certs.clone());
        }
        let client = b.build().map_err(|e| self.explain("connect", &e))?;
        let conn = client
            .get_async_connection()
            .await
            .map_err(|e| self.explain("connect", &e))?;
        Ok(Conn::Cluster(conn))
    }

    /// A crate error as the operator should read it: refused AUTH and untrusted certificates
    /// name the setting to fix; everything else carries the address.
    pub fn explain(&self, op: &'static str, e: &RedisError) -> StoreError {
        let text = e.to_string();
        let password = self
            .password_setting
            .unwrap_or("store.valkey_password_file");
        let refused = e.kind() == ErrorKind::AuthenticationFailed
            || text.contains("WRONGPASS")
            || text.contains("invalid username-password");
        if refused && self.password_setting.is_some() {
            return err(
                op,
                format!(
                    "{password}: the server at {} refused the password (WRONGPASS)",
                    self.address
                ),
            );
        }
        if refused || text.contains("NOAUTH") {
            return err(
                op,
                format!(
                    "{password}: the server at {} requires a password (NOAUTH); set \
                     store.valkey_password_file or LIMITER_VALKEY_PASSWORD",
                    self.address
                ),
            );
        }
        let lower = text.to_ascii_lowercase();
        if lower.contains("certificate") || lower.contains("unknownissuer") {
            let setting = match &self.ca_file {
                Some(p) => format!("store.valkey_ca_file ({})", p.display()),
                None => "store.valkey_ca_file (not set: the system's roots)".to_string(),
            };
            return err(
                op,
                format!(
                    "{setting}: the certificate of {} is not trusted: {text}",
                    self.address
                ),
            );
        }
        err(op, format!("{}: {text}", self.address))
    }
}

/// An error the operator must fix in the settings (a refused or missing password, an
/// untrusted certificate: see [`Target::explain`]), not a server that is away.
pub fn is_access_error(e: &StoreError) -> bool {
    let text = e.to_string();
    text.contains("(WRONGPASS)") || text.contains("(NOAUTH)") || text.contains(" is not trusted: ")
}

/// The shared connection: cheap to clone (every clone multiplexes over the same socket).
#[derive(Clone)]
pub enum Conn {
    /// The shared connection to a standalone server, reconnecting by itself.
    Single(ConnectionManager),
    /// A connection of its own to a standalone server.
    Plain(MultiplexedConnection),
    Cluster(ClusterConnection),
}

/// A call that found the shared connection dropped (the server restarted): the command never
/// reached a server, so it is sent once more, after the manager's reconnect.
fn found_dropped(e: &RedisError) -> bool {
    e.is_connection_dropped() && !e.is_timeout()
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => Box::pin(async move {
                match c.req_packed_command(cmd).await {
                    Err(e) if found_dropped(&e) => c.req_packed_command(cmd).await,
                    r => r,
                }
            }),
            Conn::Plain(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => Box::pin(async move {
                match c.req_packed_commands(pipeline, offset, count).await {
                    Err(e) if found_dropped(&e) => {
                        c.req_packed_commands(pipeline, offset, count).await
                    }
                    r => r,
                }
            }),
            Conn::Plain(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Plain(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The result of a call, its error rendered for the store.
pub fn check<T>(op: &'static str, r: RedisResult<T>) -> Result<T, StoreError> {
    r.map_err(|e| err(op, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_with_and_without_a_scheme() {
        let p = |a: &str| parse_address(a).map_err(|e| e.to_string());
        assert_eq!(
            p("127.0.0.1:6379").unwrap(),
            ("127.0.0.1".into(), 6379, false)
        );
        assert_eq!(
            p("redis://[::1]:7000/").unwrap(),
            ("::1".into(), 7000, false)
        );
        assert_eq!(
            p("rediss://valkey.internal:6380").unwrap(),
            ("valkey.internal".into(), 6380, true)
        );
        for bad in [
            "no-port",
            "host:",
            "host:99999",
            "http://h:1",
            "redis://u:p@h:1",
            ":6379",
        ] {
            let e = p(bad).unwrap_err();
            assert!(
                e.contains("store.valkey_address") && e.contains(bad),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_missing_or_empty_ca_file_names_the_setting() {
        let access = Access {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..Access::default()
        };
        let e = Target::new("rediss://h:1", &access)
            .unwrap_err()
            .to_string();
        assert!(e.contains("store.valkey_ca_file"), "{e}");
        let e = Target::new("redis://h:1", &access).unwrap_err().to_string();
        assert!(e.contains("store.valkey_ca_file"), "{e}");
    }

    #[test]
    fn debug_never_shows_the_password() {
        let access = Access {
            password: Some(ValkeyPassword {
                value: "hunter2-secret".into(),
                setting: "store.valkey_password_file",
                file: None,
            }),
            ..Access::default()
        };
        let t = Target::new("h:1", &access).unwrap();
        assert!(!format!("{t:?}").contains("hunter2"));
    }
}
