//! Agents' key directories, answered from memory and fetched behind the request (like API
//! keys, [`crate::identity::key_cache`]):
//!
//! - Keys are looked up by the pair (directory URL, keyid), never by keyid alone: a key
//!   listed by one agent proves nothing for another.
//! - A directory never seen answers [`KeyAnswer::Pending`] and is queued; the request is
//!   metered as what it otherwise is.
//! - What callers can queue is bounded: [`MAX_PENDING_PER_SOURCE`] fetches per source address,
//!   [`MAX_PENDING_PER_NETWORK`] per network (IPv4 /24, IPv6 /48), [`MAX_PENDING`] in all.
//!   Past a bound nothing is queued or held for the request; a later request asks again.
//! - At most [`MAX_DIRECTORIES`] are held. A new one takes the place of the least recently
//!   used entry that holds no keys (failed, or never fetched), else of the least recently used
//!   one with keys; one in flight is never evicted. So a flood of junk `Signature-Agent` URLs
//!   churns through failed entries and never shuts a new agent out (an evicted agent is
//!   fetched again when it comes back).
//! - The fetcher ([`crate::fetch::agent_directories`]) takes fetches [`Self::next_fetch`] hands out, at most
//!   [`MAX_FETCHES_PER_HOST`] at once to one host, so a stalled host holds few of its slots.
//! - A fetched directory is fresh for its `Cache-Control: max-age` (bounded to
//!   [`MIN_TTL_MS`]..[`MAX_TTL_MS`], [`DEFAULT_TTL_MS`] without one), then served stale while
//!   it is refetched.
//! - A failed fetch is cached for at most [`MAX_FAILURE_TTL_MS`] (5 min) and never evicts
//!   keys already cached.
//! - An address that sent an invalid signature is refused for [`REFUSED_FOR_MS`]: no
//!   signature of its is verified, and no directory is fetched for it, until then.
//! - The nonces of verified signatures ([`super::nonces`]) live here too: like the rest, they
//!   are what the verifier remembers between requests, and outlive reloads.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use parking_lot::Mutex;

use super::jwk::{parse_directory, AgentKey, DirectoryError};
use super::nonces::Nonces;

pub const DEFAULT_TTL_MS: u64 = 3600 * 1000;
pub const MIN_TTL_MS: u64 = 60 * 1000;
pub const MAX_TTL_MS: u64 = 24 * 3600 * 1000;
pub const MAX_FAILURE_TTL_MS: u64 = 5 * 60 * 1000;
pub const REFUSED_FOR_MS: u64 = 60 * 1000;
/// Fetches one source address may have queued or running.
pub const MAX_PENDING_PER_SOURCE: u32 = 2;
/// Fetches one network (IPv4 /24, IPv6 /48) may have queued or running.
pub const MAX_PENDING_PER_NETWORK: u32 = 4;
/// Fetches queued or running in all (fewer than [`MAX_DIRECTORIES`], so a new directory
/// always finds an entry to take the place of).
pub const MAX_PENDING: usize = 256;
/// Fetches of one host (the directory URL's host, any port) running at once.
pub const MAX_FETCHES_PER_HOST: u32 = 2;
/// Directories held at most (past it, the least recently used give way: see the module doc).
pub const MAX_DIRECTORIES: usize = 4096;
/// Refused addresses remembered at most (past it the oldest are forgotten).
pub const MAX_REFUSED: usize = 65536;

/// What the cache says about (directory, keyid).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyAnswer {
    Key([u8; 32]),
    /// The directory is known and lists no such key.
    Unknown,
    /// Not known yet (queued, or failing): the signature is unverified for now.
    Pending,
}

/// What a fetch brought back.
#[derive(Clone, Debug)]
pub struct Fetched {
    pub body: Vec<u8>,
    /// `Cache-Control: max-age`, in seconds.
    pub max_age_s: Option<u64>,
}

#[derive(Default)]
struct Entry {
    keys: Option<Vec<AgentKey>>,
    fresh_until_ms: u64,
    /// After a failure: no refetch before this.
    retry_after_ms: u64,
    /// Queued or running, on behalf of this source.
    in_flight: Option<IpAddr>,
    /// Handed to the fetcher (counted against its host).
    running: bool,
    last_error: Option<String>,
    /// Last looked up or queued: the least recently used give way first.
    used_ms: u64,
}

impl Entry {
    fn wants_fetch(&self, now_ms: u64) -> bool {
        self.in_flight.is_none()
            && now_ms >= self.retry_after_ms
            && (self.keys.is_none() || now_ms >= self.fresh_until_ms)
    }
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    queue: VecDeque<String>,
    per_source: HashMap<IpAddr, u32>,
    per_network: HashMap<IpAddr, u32>,
    /// Queued or running, in all.
    pending: usize,
    running_per_host: HashMap<String, u32>,
    refused: HashMap<IpAddr, u64>,
}

/// The directory cache (see the module doc).
#[derive(Default)]
pub struct DirectoryCache {
    state: Mutex<State>,
    /// Wakes the fetcher ([`crate::fetch::agent_directories`]) when a fetch is queued.
    queued: tokio::sync::Notify,
    nonces: Nonces,
}

/// The network a source address queues within: IPv4 /24, IPv6 /48.
fn network_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            IpAddr::from([a, b, c, 0])
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return network_of(IpAddr::V4(v4));
            }
            let s = v6.segments();
            IpAddr::from([s[0], s[1], s[2], 0, 0, 0, 0, 0])
        }
    }
}

/// The host a directory URL is fetched from (lower case, without the port): the per-host
/// bound's key.
fn host_of(directory: &str) -> String {
    directory
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().map(str::to_ascii_lowercase))
        .unwrap_or_default()
}

fn decrement<K: std::hash::Hash + Eq>(map: &mut HashMap<K, u32>, key: &K) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

impl State {
    /// Makes room for one more entry: the least recently used entry without keys gives way,
    /// else the least recently used one; none in flight. `false`: nothing could (every entry
    /// in flight, which [`MAX_PENDING`] rules out).
    fn make_room(&mut self) -> bool {
        if self.entries.len() < MAX_DIRECTORIES {
            return true;
        }
        let victim = self
            .entries
            .iter()
            .filter(|(_, e)| e.in_flight.is_none())
            .min_by_key(|(_, e)| (e.keys.is_some(), e.used_ms))
            .map(|(d, _)| d.clone());
        match victim {
            Some(d) => {
                self.entries.remove(&d);
                true
            }
            None => false,
        }
    }
}

/// `Cache-Control`'s `max-age`, if any.
pub fn max_age(cache_control: &str) -> Option<u64> {
    cache_control.split(',').find_map(|d| {
        let (k, v) = d.trim().split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("max-age")
            .then(|| v.trim().trim_matches('"').parse().ok())
            .flatten()
    })
}

impl DirectoryCache {
    pub fn new() -> Self {
        DirectoryCache::default()
    }

    /// Whether `source` sent an invalid signature in the last [`REFUSED_FOR_MS`].
    pub fn is_refused(&self, source: IpAddr, now_ms: u64) -> bool {
        self.state
            .lock()
            .refused
            .get(&source)
            .is_some_and(|&until| until > now_ms)
    }

    /// Remembers that `source` sent an invalid signature.
    pub fn refuse(&self, source: IpAddr, now_ms: u64) {
        let mut s = self.state.lock();
        if s.refused.len() >= MAX_REFUSED {
            s.refused.retain(|_, until| *until > now_ms);
            if s.refused.len() >= MAX_REFUSED {
                s.refused.clear();
            }
        }
        s.refused.insert(source, now_ms + REFUSED_FOR_MS);
    }

    /// The key `keyid` of `directory`, queueing a fetch (on behalf of `source`) when the
    /// directory is unknown or stale and none is in flight or backing off.
    pub fn key(&self, directory: &str, keyid: &str, source: IpAddr, now_ms: u64) -> KeyAnswer {
        let (answer, wants_fetch) = self.peek(directory, keyid, now_ms);
        if wants_fetch {
            self.request_fetch(directory, source, now_ms);
        }
        answer
    }

    /// The key `keyid` of `directory`, queueing nothing; and whether a fetch is due (the
    /// directory is unknown or stale, and none is in flight or backing off). The engine
    /// queues it with [`Self::request_fetch`] once the request is admitted.
    pub fn peek(&self, directory: &str, keyid: &str, now_ms: u64) -> (KeyAnswer, bool) {
        let mut s = self.state.lock();
        let Some(entry) = s.entries.get_mut(directory) else {
            return (KeyAnswer::Pending, true);
        };
        entry.used_ms = now_ms;
        let answer = match &entry.keys {
            None => KeyAnswer::Pending,
            Some(keys) => keys
                .iter()
                .find(|k| k.thumbprint == keyid)
                .map_or(KeyAnswer::Unknown, |k| KeyAnswer::Key(k.public)),
        };
        (answer, entry.wants_fetch(now_ms))
    }

    /// Queues a fetch of `directory` on behalf of `source` if one is due, within the bounds
    /// (see the module doc); none for an address refused. Past a bound nothing is queued nor
    /// held: a later request asks again.
    pub fn request_fetch(&self, directory: &str, source: IpAddr, now_ms: u64) {
        let mut guard = self.state.lock();
        let s = &mut *guard;
        if s.refused.get(&source).is_some_and(|&until| until > now_ms) {
            return;
        }
        if s.entries
            .get(directory)
            .is_some_and(|e| !e.wants_fetch(now_ms))
        {
            return;
        }
        let network = network_of(source);
        if s.pending >= MAX_PENDING
            || s.per_source.get(&source).copied().unwrap_or(0) >= MAX_PENDING_PER_SOURCE
            || s.per_network.get(&network).copied().unwrap_or(0) >= MAX_PENDING_PER_NETWORK
        {
            return;
        }
        if !s.entries.contains_key(directory) && !s.make_room() {
            return;
        }
        let entry = s.entries.entry(directory.to_owned()).or_default();
        entry.in_flight = Some(source);
        entry.used_ms = now_ms;
        *s.per_source.entry(source).or_insert(0) += 1;
        *s.per_network.entry(network).or_insert(0) += 1;
        s.pending += 1;
        s.queue.push_back(directory.to_owned());
        self.queued.notify_one();
    }

    /// Waits until a fetch may be queued (a wake-up, not a promise: check [`Self::next_fetch`]).
    pub async fn wait_queued(&self) {
        self.queued.notified().await;
    }

    /// The next directory to fetch (oldest first among those whose host has fewer than
    /// [`MAX_FETCHES_PER_HOST`] running), and the source it was queued for; it counts as
    /// running against its host until [`Self::landed`].
    pub fn next_fetch(&self) -> Option<(String, IpAddr)> {
        let mut guard = self.state.lock();
        let s = &mut *guard;
        let at = s.queue.iter().position(|d| {
            s.running_per_host.get(&host_of(d)).copied().unwrap_or(0) < MAX_FETCHES_PER_HOST
        })?;
        let directory = s.queue.remove(at)?;
        *s.running_per_host.entry(host_of(&directory)).or_insert(0) += 1;
        // Queued means in flight, and an entry in flight is never evicted: it is held.
        let entry = s.entries.get_mut(&directory)?;
        entry.running = true;
        let source = entry.in_flight?;
        Some((directory, source))
    }

    /// A fetch of `directory` landed at `now_ms` (`_source`: the one [`Self::next_fetch`]
    /// gave; the entry remembers it). A body that is not a usable directory counts as a
    /// failure. Returns the keys now held, or the error.
    pub fn landed(
        &self,
        directory: &str,
        _source: IpAddr,
        result: Result<Fetched, String>,
        now_ms: u64,
    ) -> Result<usize, String> {
        let parsed = result.and_then(|f| {
            parse_directory(&f.body)
                .map(|keys| (keys, f.max_age_s))
                .map_err(|e: DirectoryError| e.to_string())
        });
        let mut guard = self.state.lock();
        let s = &mut *guard;
        if !s.entries.contains_key(directory) {
            // Landed unasked (tests, tools): it still needs a place.
            s.make_room();
        }
        let entry = s.entries.entry(directory.to_owned()).or_default();
        let was = (entry.in_flight.take(), std::mem::take(&mut entry.running));
        entry.used_ms = now_ms;
        let outcome = match parsed {
            Ok((keys, max_age_s)) => {
                let ttl = max_age_s
                    .map_or(DEFAULT_TTL_MS, |s| s.saturating_mul(1000))
                    .clamp(MIN_TTL_MS, MAX_TTL_MS);
                let n = keys.len();
                entry.keys = Some(keys);
                entry.fresh_until_ms = now_ms + ttl;
                entry.retry_after_ms = 0;
                entry.last_error = None;
                Ok(n)
            }
            Err(e) => {
                // Keys already held stay: a failing directory keeps its last good keys.
                entry.retry_after_ms = now_ms + MAX_FAILURE_TTL_MS;
                entry.last_error = Some(e.clone());
                Err(e)
            }
        };
        if let (Some(source), running) = was {
            decrement(&mut s.per_source, &source);
            decrement(&mut s.per_network, &network_of(source));
            s.pending = s.pending.saturating_sub(1);
            if running {
                decrement(&mut s.running_per_host, &host_of(directory));
            } else {
                // Landed before the fetcher took it: it is no longer queued either.
                s.queue.retain(|d| d != directory);
            }
        }
        outcome
    }

    /// The nonces of verified signatures seen (see [`super::nonces`]).
    pub fn nonces(&self) -> &Nonces {
        &self.nonces
    }

    /// The directories held, with their key count and last error (for `limiterctl`).
    pub fn summary(&self) -> Vec<(String, usize, Option<String>)> {
        let s = self.state.lock();
        let mut out: Vec<_> = s
            .entries
            .iter()
            .map(|(d, e)| {
                (
                    d.clone(),
                    e.keys.as_ref().map_or(0, Vec::len),
                    e.last_error.clone(),
                )
            })
            .collect();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests;
