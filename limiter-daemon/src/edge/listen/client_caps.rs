//! The proxy listeners' connection caps, shared by every proxy thread: connections open at once
//! over all proxy listeners (`[http] max_connections`) and from one client address
//! (`max_connections_per_client`), both checked at accept, before a byte is read. A
//! connection past either cap is closed at once: the client learns now, its descriptor is
//! given back now, and nobody else's connection waits in the kernel's backlog behind it.
//!
//! Who "one client" is: the TCP peer, its IPv6 address grouped by `[identity] ipv6_prefix`
//! like every counter. A `[identity] trusted_proxies` peer carries many clients (a front end,
//! a balancer), so it is not capped as one: with the PROXY protocol its connections count
//! against the address each header names, without it they count only toward the total.
//!
//! Why a per-client cap at all: the kernel's connection ceiling bounds how fast an address
//! opens connections, not how many it keeps. A caller that keeps more open than its ceiling's
//! burst has made that its own problem, not everyone's (issue 35, D1).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::accept::Throttled;
use super::budget::ConnectionBudget;
use crate::config::http::HttpSettings;
use crate::identity::client_ip;

/// The caps of every proxy listener of the process.
#[derive(Debug)]
pub struct ClientCaps {
    total: Arc<Semaphore>,
    max_total: usize,
    per_client: u32,
    v6_prefix: u8,
    trusted: Vec<IpNet>,
    /// Connections open per client (grouped) address; an address leaves with its last one.
    open: Mutex<HashMap<IpAddr, u32>>,
}

/// One connection's place under the caps, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    caps: Arc<ClientCaps>,
    _total: OwnedSemaphorePermit,
    client: Option<IpAddr>,
}

/// Why a connection was not let in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The proxy listeners hold `max_connections` already.
    Full,
    /// This client (grouped address) holds `max_connections_per_client` already.
    Client(IpAddr),
}

impl ClientCaps {
    /// The caps `s` and the descriptor limit give (see [`ConnectionBudget`]).
    pub fn new(s: &HttpSettings, budget: &ConnectionBudget) -> Arc<Self> {
        Arc::new(ClientCaps {
            total: Arc::new(Semaphore::new(budget.proxy.get())),
            max_total: budget.proxy.get(),
            per_client: u32::try_from(budget.per_client.get()).unwrap_or(u32::MAX),
            v6_prefix: s.client_ipv6_prefix,
            trusted: s.proxy_protocol_peers.clone(),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// `max_connections` in force.
    pub fn max_total(&self) -> usize {
        self.max_total
    }

    /// `max_connections_per_client` in force.
    pub fn per_client(&self) -> u32 {
        self.per_client
    }

    /// Whether `peer` is a trusted proxy (its connections are not one client's).
    pub fn trusted(&self, peer: IpAddr) -> bool {
        client_ip::trusted(peer, &self.trusted)
    }

    /// A place for a connection just accepted from `peer`: counted against `peer` unless it
    /// is a trusted proxy (then [`Slot::claim`] may name the client later).
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Slot, Refused> {
        let permit = Arc::clone(&self.total)
            .try_acquire_owned()
            .map_err(|_| Refused::Full)?;
        let mut slot = Slot {
            caps: Arc::clone(self),
            _total: permit,
            client: None,
        };
        if !self.trusted(peer) {
            slot.claim(peer)?;
        }
        Ok(slot)
    }

    fn take(&self, ip: IpAddr) -> bool {
        let mut open = self.open.lock();
        // `per_client` is at least 1: an entry made here is counted at once, never left at 0.
        let n = open.entry(ip).or_insert(0);
        if *n >= self.per_client {
            return false;
        }
        *n += 1;
        true
    }

    fn give_back(&self, ip: IpAddr) {
        let mut open = self.open.lock();
        if let Some(n) = open.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&ip);
            }
        }
    }

    /// Connections open from `client` (grouped) now.
    pub fn open_from(&self, client: IpAddr) -> u32 {
        let key = client_ip::group(client, self.v6_prefix);
        self.open.lock().get(&key).copied().unwrap_or(0)
    }

    /// Addresses holding connections now (bounded by `max_connections`).
    pub fn clients(&self) -> usize {
        self.open.lock().len()
    }
}

/// One accept loop's log of connections refused at the caps: a line per kind at most every
/// [`LOG_EVERY`](super::accept::LOG_EVERY), so a flood does not turn into a flood of lines.
#[derive(Debug, Default)]
pub struct Refusals {
    full: Throttled,
    client: Throttled,
}

impl Refusals {
    pub fn log(&mut self, caps: &ClientCaps, why: Refused) {
        match why {
            Refused::Full => {
                if let Some(unlogged) = self.full.take() {
                    tracing::warn!(
                        max_connections = caps.max_total(),
                        unlogged,
                        "proxy connection cap reached: new connections are closed until some \
                         close (http.max_connections)"
                    );
                }
            }
            Refused::Client(client) => {
                tracing::debug!(%client, "connection closed: the client's connection cap");
                if let Some(unlogged) = self.client.take() {
                    tracing::info!(
                        %client,
                        max_connections_per_client = caps.per_client(),
                        unlogged,
                        "a client holds its whole share of connections: its new ones are \
                         closed (http.max_connections_per_client)"
                    );
                }
            }
        }
    }
}

impl Slot {
    /// Counts the connection against `client` (a trusted proxy's PROXY header names it after
    /// accept). A slot counts against one client only: a second claim is ignored.
    pub fn claim(&mut self, client: IpAddr) -> Result<(), Refused> {
        if self.client.is_some() {
            return Ok(());
        }
        let key = client_ip::group(client, self.caps.v6_prefix);
        if !self.caps.take(key) {
            return Err(Refused::Client(key));
        }
        self.client = Some(key);
        Ok(())
    }

    /// [`Slot::claim`] for the client a trusted proxy's PROXY header named; `false` (logged)
    /// when that client holds its share already.
    pub fn claimed_by(&mut self, client: SocketAddr) -> bool {
        match self.claim(client.ip()) {
            Ok(()) => true,
            Err(_) => {
                tracing::debug!(
                    %client,
                    "connection closed: the client's connection cap (PROXY header)"
                );
                false
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(ip) = self.client {
            self.caps.give_back(ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(total: usize, per_client: usize) -> Arc<ClientCaps> {
        let mut s = HttpSettings::from_toml(&format!(
            "max_connections = {total}\nmax_connections_per_client = {per_client}"
        ))
        .unwrap();
        s.proxy_protocol_peers = vec!["10.0.0.0/8".parse().unwrap()];
        ClientCaps::new(&s, &ConnectionBudget::derive(&s, 1 << 20))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_address_gets_its_share_and_the_total_is_shared() {
        let c = caps(5, 2);
        let a1 = c.admit(ip("203.0.113.1")).unwrap();
        let _a2 = c.admit(ip("203.0.113.1")).unwrap();
        assert_eq!(
            c.admit(ip("203.0.113.1")).unwrap_err(),
            Refused::Client(ip("203.0.113.1"))
        );
        // A refusal takes no place: others still get in, up to the total.
        let _b = c.admit(ip("203.0.113.2")).unwrap();
        let _d = c.admit(ip("203.0.113.3")).unwrap();
        let _e = c.admit(ip("203.0.113.4")).unwrap();
        assert_eq!(c.admit(ip("203.0.113.5")).unwrap_err(), Refused::Full);
        drop(a1);
        assert_eq!(c.open_from(ip("203.0.113.1")), 1);
        let _a3 = c.admit(ip("203.0.113.1")).unwrap();
        assert_eq!(c.open_from(ip("203.0.113.1")), 2);
    }

    #[test]
    fn a_trusted_proxy_is_many_clients() {
        let c = caps(100, 2);
        let proxy = ip("10.1.2.3");
        let mut held = Vec::new();
        for _ in 0..10 {
            held.push(c.admit(proxy).unwrap());
        }
        assert_eq!(c.open_from(proxy), 0);
        // The PROXY header names the client: counted against it.
        held[0].claim(ip("198.51.100.7")).unwrap();
        held[1].claim(ip("198.51.100.7")).unwrap();
        assert_eq!(
            held[2].claim(ip("198.51.100.7")),
            Err(Refused::Client(ip("198.51.100.7")))
        );
        held[2].claim(ip("198.51.100.8")).unwrap();
        held.clear();
        assert_eq!(
            c.clients(),
            0,
            "every address leaves with its last connection"
        );
    }

    #[test]
    fn ipv6_clients_are_grouped_by_prefix_and_mapped_ipv4_is_ipv4() {
        let c = caps(100, 2);
        let _a = c.admit(ip("2001:db8:1:1::1")).unwrap();
        let _b = c.admit(ip("2001:db8:1:1::2")).unwrap();
        assert!(c.admit(ip("2001:db8:1:1:ffff::3")).is_err());
        assert!(c.admit(ip("2001:db8:1:2::1")).is_ok());
        let _m = c.admit(ip("::ffff:192.0.2.1")).unwrap();
        let _v4 = c.admit(ip("192.0.2.1")).unwrap();
        assert!(c.admit(ip("192.0.2.1")).is_err());
    }
}
