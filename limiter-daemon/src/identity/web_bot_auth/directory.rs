//! Agents' key directories, answered from memory and fetched behind the request (like API
//! keys, [`crate::identity::key_cache`]):
//!
//! - Keys are looked up by the pair (directory URL, keyid), never by keyid alone: a key
//!   listed by one agent proves nothing for another.
//! - A directory never seen answers [`KeyAnswer::Pending`] and is queued; the request is
//!   metered as what it otherwise is. Fetches in flight are bounded per source address.
//! - A fetched directory is fresh for its `Cache-Control: max-age` (bounded to
//!   [`MIN_TTL_MS`]..[`MAX_TTL_MS`], [`DEFAULT_TTL_MS`] without one), then served stale while
//!   it is refetched.
//! - A failed fetch is cached for at most [`MAX_FAILURE_TTL_MS`] (5 min) and never evicts
//!   keys already cached.
//! - An address that sent an invalid signature is refused for [`REFUSED_FOR_MS`]: no
//!   signature of its is verified, and no directory is fetched for it, until then.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use parking_lot::Mutex;

use super::jwk::{parse_directory, AgentKey, DirectoryError};

pub const DEFAULT_TTL_MS: u64 = 3600 * 1000;
pub const MIN_TTL_MS: u64 = 60 * 1000;
pub const MAX_TTL_MS: u64 = 24 * 3600 * 1000;
pub const MAX_FAILURE_TTL_MS: u64 = 5 * 60 * 1000;
pub const REFUSED_FOR_MS: u64 = 60 * 1000;
/// Fetches one source address may have in flight.
pub const MAX_PENDING_PER_SOURCE: u32 = 2;
/// Directories held at most (past it, new agents stay pending-less: unverified).
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
    in_flight: bool,
    last_error: Option<String>,
}

impl Entry {
    fn wants_fetch(&self, now_ms: u64) -> bool {
        !self.in_flight
            && now_ms >= self.retry_after_ms
            && (self.keys.is_none() || now_ms >= self.fresh_until_ms)
    }
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    queue: VecDeque<(String, IpAddr)>,
    per_source: HashMap<IpAddr, u32>,
    refused: HashMap<IpAddr, u64>,
}

/// The directory cache (see the module doc).
#[derive(Default)]
pub struct DirectoryCache {
    state: Mutex<State>,
    /// Wakes the fetcher ([`super::fetcher`]) when a fetch is queued.
    queued: tokio::sync::Notify,
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
        let s = self.state.lock();
        let Some(entry) = s.entries.get(directory) else {
            return (KeyAnswer::Pending, s.entries.len() < MAX_DIRECTORIES);
        };
        let answer = match &entry.keys {
            None => KeyAnswer::Pending,
            Some(keys) => keys
                .iter()
                .find(|k| k.thumbprint == keyid)
                .map_or(KeyAnswer::Unknown, |k| KeyAnswer::Key(k.public)),
        };
        (answer, entry.wants_fetch(now_ms))
    }

    /// Queues a fetch of `directory` on behalf of `source` if one is due, within the bounds:
    /// [`MAX_PENDING_PER_SOURCE`] in flight per source, [`MAX_DIRECTORIES`] held, none for
    /// an address refused.
    pub fn request_fetch(&self, directory: &str, source: IpAddr, now_ms: u64) {
        let mut guard = self.state.lock();
        let s = &mut *guard;
        if s.refused.get(&source).is_some_and(|&until| until > now_ms) {
            return;
        }
        if !s.entries.contains_key(directory) && s.entries.len() >= MAX_DIRECTORIES {
            return;
        }
        let entry = s.entries.entry(directory.to_owned()).or_default();
        if !entry.wants_fetch(now_ms) {
            return;
        }
        let n = s.per_source.entry(source).or_insert(0);
        if *n < MAX_PENDING_PER_SOURCE {
            *n += 1;
            entry.in_flight = true;
            s.queue.push_back((directory.to_owned(), source));
            self.queued.notify_one();
        }
    }

    /// Waits until a fetch may be queued (a wake-up, not a promise: check [`Self::next_fetch`]).
    pub async fn wait_queued(&self) {
        self.queued.notified().await;
    }

    /// The next directory to fetch, if any.
    pub fn next_fetch(&self) -> Option<(String, IpAddr)> {
        self.state.lock().queue.pop_front()
    }

    /// A fetch of `directory` (queued for `source`) landed at `now_ms`. A body that is not a
    /// usable directory counts as a failure. Returns the keys now held, or the error.
    pub fn landed(
        &self,
        directory: &str,
        source: IpAddr,
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
        if let Some(n) = s.per_source.get_mut(&source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                s.per_source.remove(&source);
            }
        }
        let entry = s.entries.entry(directory.to_owned()).or_default();
        entry.in_flight = false;
        match parsed {
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
        }
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
