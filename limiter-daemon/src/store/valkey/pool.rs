//! Connections to Valkey through the `redis` crate: a standalone server or a Valkey Cluster
//! (detected from the server at open), a few blocking connections each behind its own mutex,
//! connect and read/write timeouts so a dead server fails a call instead of hanging a request,
//! and one reconnect when a pooled connection turns out dropped.

use std::time::Duration;

use parking_lot::Mutex;
use redis::cluster::{ClusterClient, ClusterConnection};
use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, IntoConnectionInfo, RedisError};

use crate::store::error::StoreError;

/// Connections kept open; requests spread over them by identity, so one slow caller holds one.
pub const POOL: usize = 8;

/// Standalone or cluster, as the server said when the store opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    Standalone,
    Cluster,
}

enum Client {
    Standalone(redis::Client),
    Cluster(ClusterClient),
}

enum Conn {
    Standalone(redis::Connection),
    // Boxed: a cluster connection is several times the size of a standalone one.
    Cluster(Box<ClusterConnection>),
}

impl Conn {
    fn like(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Conn::Standalone(c) => c,
            Conn::Cluster(c) => &mut **c,
        }
    }
}

pub struct Pool {
    address: String,
    timeout: Duration,
    client: Client,
    slots: Vec<Mutex<Option<Conn>>>,
}

pub fn err(op: &'static str, message: impl Into<String>) -> StoreError {
    StoreError::Valkey {
        op,
        message: message.into(),
    }
}

/// `host:port` (IPv6 hosts in brackets) as the crate's connection info.
fn info(address: &str) -> Result<ConnectionInfo, StoreError> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| err("connect", format!("{address:?} is not host:port")))?;
    let port: u16 = port
        .parse()
        .map_err(|_| err("connect", format!("{address:?}: bad port")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ConnectionAddr::Tcp(host.to_string(), port)
        .into_connection_info()
        .map_err(|e| err("connect", e.to_string()))
}

impl Pool {
    /// Connects to `address`, asks whether it is a cluster node, and keeps the matching client.
    pub fn open(address: &str, timeout: Duration) -> Result<Pool, StoreError> {
        let info = info(address)?;
        let single =
            redis::Client::open(info.clone()).map_err(|e| err("connect", e.to_string()))?;
        let mut probe = single
            .get_connection_with_timeout(timeout)
            .map_err(|e| err("connect", format!("{address}: {e}")))?;
        set_timeouts(&probe, timeout).map_err(|e| err("connect", e.to_string()))?;
        let cluster_info: String = redis::cmd("INFO")
            .arg("cluster")
            .query(&mut probe)
            .map_err(|e| err("connect", format!("{address}: {e}")))?;
        let client = if cluster_info.contains("cluster_enabled:1") {
            Client::Cluster(
                ClusterClient::builder(vec![info])
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .build()
                    .map_err(|e| err("connect", e.to_string()))?,
            )
        } else {
            Client::Standalone(single)
        };
        let pool = Pool {
            address: address.to_string(),
            timeout,
            client,
            slots: (0..POOL).map(|_| Mutex::new(None)).collect(),
        };
        if let (Client::Standalone(_), Some(slot)) = (&pool.client, pool.slots.first()) {
            *slot.lock() = Some(Conn::Standalone(probe));
        }
        Ok(pool)
    }

    pub fn topology(&self) -> Topology {
        match self.client {
            Client::Standalone(_) => Topology::Standalone,
            Client::Cluster(_) => Topology::Cluster,
        }
    }

    fn connect(&self) -> Result<Conn, RedisError> {
        Ok(match &self.client {
            Client::Standalone(c) => {
                let conn = c.get_connection_with_timeout(self.timeout)?;
                set_timeouts(&conn, self.timeout)?;
                Conn::Standalone(conn)
            }
            Client::Cluster(c) => {
                let conn = c.get_connection()?;
                conn.set_write_timeout(Some(self.timeout))?;
                conn.set_read_timeout(Some(self.timeout))?;
                Conn::Cluster(Box::new(conn))
            }
        })
    }

    /// Runs `f` on pooled connection `slot`. A connection that failed at the transport level is
    /// dropped (a late reply must never be read as the answer to the next command); when it was
    /// found already dropped (the server restarted), `f` runs once more on a fresh one.
    pub fn with<T>(
        &self,
        slot: usize,
        op: &'static str,
        mut f: impl FnMut(&mut dyn ConnectionLike) -> Result<T, RedisError>,
    ) -> Result<T, StoreError> {
        let mut guard = self.slots[slot % POOL].lock();
        for attempt in 0..2 {
            let conn = match guard.as_mut() {
                Some(c) => c,
                None => guard.insert(
                    self.connect()
                        .map_err(|e| err(op, format!("connect {}: {e}", self.address)))?,
                ),
            };
            match f(conn.like()) {
                Ok(v) => return Ok(v),
                Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => {
                    *guard = None;
                    if attempt == 0 && e.is_connection_dropped() && !e.is_timeout() {
                        tracing::warn!(error = %e, "valkey connection dropped; reconnecting");
                        continue;
                    }
                    return Err(err(op, e.to_string()));
                }
                Err(e) => return Err(err(op, e.to_string())),
            }
        }
        Err(err(op, "no connection"))
    }
}

fn set_timeouts(c: &redis::Connection, timeout: Duration) -> Result<(), RedisError> {
    c.set_read_timeout(Some(timeout))?;
    c.set_write_timeout(Some(timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_to_tcp_hosts_and_ports() {
        let addr = |a: &str| info(a).map(|i| i.addr().to_string());
        assert_eq!(addr("127.0.0.1:6379").unwrap(), "127.0.0.1:6379");
        assert_eq!(addr("[::1]:7000").unwrap(), "::1:7000");
        assert_eq!(
            addr("valkey.internal:6380").unwrap(),
            "valkey.internal:6380"
        );
        for bad in ["no-port", "host:", "host:99999", "host:six"] {
            let e = info(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }
}
