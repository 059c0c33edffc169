//! The reverse-DNS proof of crawlers, answered from memory and looked up behind the request,
//! like API keys ([`super::key_cache`]):
//!
//! - An address never checked answers [`DnsCheck::Pending`] (the caller is metered as what it
//!   otherwise is) and queues a check; once it lands the address settles to confirmed or
//!   refuted.
//! - Checks in flight are bounded (`crawlers.dns_max_in_flight`): past the bound a new address
//!   answers [`DnsCheck::Deferred`] and is not queued, so a flood of fake Googlebots from many
//!   addresses buys at most that many lookups at a time.
//! - Answers are kept for `dns_ttl` (confirmed) or `dns_negative_ttl` (refuted or failed),
//!   then served stale while they are checked again. At most `dns_cache_capacity` addresses
//!   are held; past it expired answers go first, then any.
//!
//! The checks run on a thread of their own with a small Tokio runtime ([`CrawlerDns::spawn`]),
//! so an engine built outside any runtime (tests, benches, library users) works the same. The
//! thread ends on a cancellation token, and holds a task tracker open until it has ended, as
//! the key cache's does. Only the user agents that claim a crawler ever reach this cache.

use super::owned_thread::OwnedThread;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::task_tracker::TaskTrackerToken;

use super::crawler_fcrdns::{self, Dns, Fcrdns, HickoryDns};
use crate::clock::Clock;
use crate::config::CrawlerSettings;

/// The cache's answer for an address whose user agent claims a crawler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnsCheck {
    Confirmed,
    /// No name under a suffix resolves back to the address (or the lookup failed).
    Refuted,
    /// Not checked yet; a check is queued.
    Pending,
    /// Not checked yet, and the bound of checks in flight is reached: nothing queued.
    Deferred,
}

#[derive(Clone, Copy, Debug)]
struct Answer {
    confirmed: bool,
    at_ms: u64,
}

/// What the lookups use; replaced whole on reload.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Setup {
    suffixes: Vec<String>,
    server: Option<std::net::SocketAddr>,
    timeout: std::time::Duration,
    ttl_ms: u64,
    negative_ttl_ms: u64,
    capacity: usize,
    max_in_flight: usize,
}

impl Setup {
    fn of(s: &CrawlerSettings) -> Self {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Setup {
            suffixes: s.rdns_suffixes.clone(),
            server: s.resolver,
            timeout: s.dns_timeout,
            ttl_ms: ms(s.dns_ttl),
            negative_ttl_ms: ms(s.dns_negative_ttl),
            capacity: s.dns_cache_capacity.get(),
            max_in_flight: s.dns_max_in_flight.get() as usize,
        }
    }

    /// Whether answers made under `self` still hold under `other`.
    fn same_proof(&self, other: &Setup) -> bool {
        self.suffixes == other.suffixes && self.server == other.server
    }
}

#[derive(Default)]
struct Queue {
    pending: HashSet<IpAddr>,
    order: VecDeque<IpAddr>,
}

/// Lookup results since start, read by the metrics.
#[derive(Debug, Default)]
pub struct DnsStats {
    pub confirmed: AtomicU64,
    pub refuted: AtomicU64,
    pub failed: AtomicU64,
}

pub struct CrawlerDns {
    answers: RwLock<HashMap<IpAddr, Answer>>,
    queue: Mutex<Queue>,
    wake: Notify,
    setup: RwLock<Arc<Setup>>,
    /// Bumped when the proof changes (suffixes, server): a check started before lands nowhere.
    generation: AtomicU64,
    /// `None`: the resolver is built from the setup on the lookup thread; tests put a table.
    dns: Mutex<Option<(u64, Arc<dyn Dns>)>>,
    clock: Arc<dyn Clock>,
    pub stats: DnsStats,
}

impl CrawlerDns {
    pub fn new(settings: &CrawlerSettings, clock: Arc<dyn Clock>) -> Self {
        CrawlerDns {
            answers: RwLock::new(HashMap::new()),
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
            setup: RwLock::new(Arc::new(Setup::of(settings))),
            generation: AtomicU64::new(0),
            dns: Mutex::new(None),
            clock,
            stats: DnsStats::default(),
        }
    }

    /// Tests: answer from `dns` instead of a resolver built from the settings.
    pub fn with_dns(self, dns: Arc<dyn Dns>) -> Self {
        *self.dns.lock() = Some((u64::MAX, dns));
        self
    }

    /// Whether DNS proof is configured (`rdns_suffixes` not empty).
    pub fn enabled(&self) -> bool {
        !self.setup.read().suffixes.is_empty()
    }

    /// Applies a reloaded `[crawlers]`: new bounds and lifetimes at once; a new suffix list or
    /// server drops every answer (they were proofs under the old rules).
    pub fn configure(&self, settings: &CrawlerSettings) {
        let new = Arc::new(Setup::of(settings));
        let mut setup = self.setup.write();
        if !setup.same_proof(&new) {
            self.generation.fetch_add(1, Ordering::AcqRel);
            self.answers.write().clear();
            let mut dns = self.dns.lock();
            if dns.as_ref().is_some_and(|(g, _)| *g != u64::MAX) {
                *dns = None;
            }
        }
        *setup = new;
    }

    /// Addresses answered and checks in flight (tests check both stay bounded).
    pub fn held(&self) -> (usize, usize) {
        (self.answers.read().len(), self.queue.lock().pending.len())
    }

    /// Answers from memory; never waits for DNS.
    pub fn check(&self, ip: IpAddr, now_ms: u64) -> DnsCheck {
        let setup = Arc::clone(&self.setup.read());
        let cached = self.answers.read().get(&ip).copied();
        let (answer, refresh) = match cached {
            None => (DnsCheck::Pending, true),
            Some(a) => {
                let ttl = if a.confirmed {
                    setup.ttl_ms
                } else {
                    setup.negative_ttl_ms
                };
                let answer = if a.confirmed {
                    DnsCheck::Confirmed
                } else {
                    DnsCheck::Refuted
                };
                (answer, now_ms.saturating_sub(a.at_ms) >= ttl)
            }
        };
        if !refresh {
            return answer;
        }
        let queued = self.request(ip, setup.max_in_flight);
        match answer {
            DnsCheck::Pending if !queued => DnsCheck::Deferred,
            // A refresh refused by the bound keeps serving the cached answer.
            answer => answer,
        }
    }

    fn request(&self, ip: IpAddr, bound: usize) -> bool {
        let mut q = self.queue.lock();
        if q.pending.contains(&ip) {
            return true;
        }
        if q.pending.len() >= bound {
            return false;
        }
        q.pending.insert(ip);
        q.order.push_back(ip);
        drop(q);
        self.wake.notify_one();
        true
    }

    fn resolver(&self, setup: &Setup) -> Option<Arc<dyn Dns>> {
        let generation = self.generation.load(Ordering::Acquire);
        let mut dns = self.dns.lock();
        if let Some((g, d)) = &*dns {
            if *g == generation || *g == u64::MAX {
                return Some(Arc::clone(d));
            }
        }
        match HickoryDns::new(setup.server, setup.timeout) {
            Ok(d) => {
                let d: Arc<dyn Dns> = Arc::new(d);
                *dns = Some((generation, Arc::clone(&d)));
                Some(d)
            }
            Err(err) => {
                tracing::error!(error = %err, "crawler DNS: cannot build a resolver; claims stay unverified");
                None
            }
        }
    }

    /// Checks one address and stores the answer.
    async fn settle(&self, ip: IpAddr) {
        let setup = Arc::clone(&self.setup.read());
        let generation = self.generation.load(Ordering::Acquire);
        let outcome = match self.resolver(&setup) {
            Some(dns) => tokio::time::timeout(
                setup.timeout,
                crawler_fcrdns::check(&*dns, ip, &setup.suffixes),
            )
            .await
            .unwrap_or_else(|_| Fcrdns::Failed("timed out".into())),
            None => Fcrdns::Failed("no resolver".into()),
        };
        let confirmed = match &outcome {
            Fcrdns::Confirmed { name } => {
                tracing::debug!(%ip, %name, "crawler DNS: confirmed");
                self.stats.confirmed.fetch_add(1, Ordering::Relaxed);
                true
            }
            Fcrdns::Refuted => {
                self.stats.refuted.fetch_add(1, Ordering::Relaxed);
                false
            }
            Fcrdns::Failed(err) => {
                tracing::debug!(%ip, error = %err, "crawler DNS: lookup failed; unverified until retried");
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                false
            }
        };
        let now = self.clock.now_ms();
        {
            let mut answers = self.answers.write();
            if self.generation.load(Ordering::Acquire) == generation {
                if answers.len() >= setup.capacity && !answers.contains_key(&ip) {
                    evict(&mut answers, &setup, now);
                }
                answers.insert(
                    ip,
                    Answer {
                        confirmed,
                        at_ms: now,
                    },
                );
            }
        }
        let mut q = self.queue.lock();
        q.pending.remove(&ip);
    }

    /// Runs every queued check now, concurrently, and returns how many ran (tests; the
    /// lookup thread runs [`CrawlerDns::run`]).
    pub async fn process_pending(&self) -> usize {
        let batch: Vec<IpAddr> = self.queue.lock().order.drain(..).collect();
        let n = batch.len();
        futures_util::future::join_all(batch.into_iter().map(|ip| self.settle(ip))).await;
        n
    }

    /// Lands queued checks until `stop` is cancelled; each check runs as its own task, at most
    /// `dns_max_in_flight` of them (the queue's bound).
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            let next: Vec<IpAddr> = self.queue.lock().order.drain(..).collect();
            for ip in next {
                let me = Arc::clone(&self);
                tasks.spawn(async move { me.settle(ip).await });
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = self.wake.notified() => {}
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        tasks.abort_all();
    }

    /// Starts the lookup thread. It ends when `stop` is cancelled or the returned guard
    /// drops; `drain`, when given, is held until it has ended.
    pub fn spawn(
        self: &Arc<Self>,
        stop: &CancellationToken,
        drain: Option<TaskTrackerToken>,
    ) -> DnsThread {
        let stop = stop.child_token();
        let me = Arc::clone(self);
        let until = stop.clone();
        let handle = std::thread::Builder::new()
            .name("crawler-dns".into())
            .spawn(move || {
                let _drain = drain;
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt.block_on(me.run(until)),
                    Err(err) => tracing::error!(error = %err, "crawler DNS: cannot start its runtime; claims stay unverified"),
                }
            })
            .ok();
        if handle.is_none() {
            tracing::error!("cannot start the crawler-dns thread; claims stay unverified");
        }
        OwnedThread::new(stop, handle)
    }
}

fn evict(answers: &mut HashMap<IpAddr, Answer>, setup: &Setup, now: u64) {
    answers.retain(|_, a| {
        let ttl = if a.confirmed {
            setup.ttl_ms
        } else {
            setup.negative_ttl_ms
        };
        now.saturating_sub(a.at_ms) < ttl
    });
    if answers.len() >= setup.capacity {
        if let Some(victim) = answers.keys().next().copied() {
            answers.remove(&victim);
        }
    }
}

/// Owns the lookup thread (see [`OwnedThread`]).
pub type DnsThread = OwnedThread;

#[cfg(test)]
mod tests {
    use futures_util::future::BoxFuture;

    use super::*;
    use crate::clock::ManualClock;
    use crate::identity::crawler_fcrdns::DnsFailed;

    /// Confirms every address whose last octet is odd.
    struct Odd(AtomicU64);

    impl Dns for Odd {
        fn reverse(&self, ip: IpAddr) -> BoxFuture<'_, Result<Vec<String>, DnsFailed>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            let name = format!("{}.googlebot.com", ip.to_string().replace('.', "-"));
            Box::pin(async move { Ok(vec![name]) })
        }
        fn forward<'a>(
            &'a self,
            name: &'a str,
            _v6: bool,
        ) -> BoxFuture<'a, Result<Vec<IpAddr>, DnsFailed>> {
            let ip: IpAddr = name
                .trim_end_matches(".googlebot.com")
                .replace('-', ".")
                .parse()
                .unwrap();
            let odd = matches!(ip, IpAddr::V4(v) if v.octets()[3] % 2 == 1);
            Box::pin(async move { Ok(if odd { vec![ip] } else { Vec::new() }) })
        }
    }

    fn dns(text: &str, clock: &Arc<ManualClock>) -> (CrawlerDns, Arc<Odd>) {
        let raw: crate::config::crawlers::RawCrawlers = toml::from_str(text).unwrap();
        let settings = CrawlerSettings::validate(raw).unwrap();
        let table = Arc::new(Odd(AtomicU64::new(0)));
        let c =
            CrawlerDns::new(&settings, Arc::clone(clock) as _).with_dns(Arc::clone(&table) as _);
        (c, table)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[tokio::test]
    async fn pending_until_the_check_lands_then_cached_for_the_ttls() {
        let clock = Arc::new(ManualClock::new(1_000));
        let (c, table) = dns("dns_ttl = \"1h\"\ndns_negative_ttl = \"10m\"\n", &clock);
        let (good, fake) = (ip("66.249.66.1"), ip("66.249.66.2"));
        assert_eq!(c.check(good, 1_000), DnsCheck::Pending);
        assert_eq!(c.check(good, 1_000), DnsCheck::Pending, "queued once");
        assert_eq!(c.check(fake, 1_000), DnsCheck::Pending);
        assert_eq!(c.process_pending().await, 2);
        assert_eq!(c.check(good, 1_000), DnsCheck::Confirmed);
        assert_eq!(c.check(fake, 1_000), DnsCheck::Refuted);
        assert_eq!(c.stats.confirmed.load(Ordering::Relaxed), 1);
        assert_eq!(c.stats.refuted.load(Ordering::Relaxed), 1);
        // Within the negative TTL the fake is not looked up again; past it, it is (served
        // refuted meanwhile).
        let later = 1_000 + 600_000;
        assert_eq!(c.check(fake, later - 1), DnsCheck::Refuted);
        assert_eq!(c.process_pending().await, 0);
        assert_eq!(c.check(fake, later), DnsCheck::Refuted);
        assert_eq!(
            c.check(good, later),
            DnsCheck::Confirmed,
            "positive TTL is longer"
        );
        assert_eq!(c.process_pending().await, 1);
        assert_eq!(table.0.load(Ordering::Relaxed), 3);
    }

    #[tokio::test]
    async fn checks_in_flight_and_answers_held_stay_bounded() {
        let clock = Arc::new(ManualClock::new(0));
        let (c, _) = dns("dns_max_in_flight = 3\ndns_cache_capacity = 5\n", &clock);
        let mut deferred = 0;
        for i in 0..10 {
            match c.check(ip(&format!("192.0.2.{i}")), 0) {
                DnsCheck::Pending => {}
                DnsCheck::Deferred => deferred += 1,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(deferred, 7);
        assert_eq!(c.held(), (0, 3));
        for round in 0..10 {
            for i in 0..3 {
                c.check(ip(&format!("198.51.{round}.{i}")), 0);
            }
            c.process_pending().await;
        }
        let (answers, in_flight) = c.held();
        assert!(answers <= 5, "{answers}");
        assert_eq!(in_flight, 0);
    }

    #[tokio::test]
    async fn a_new_suffix_list_drops_the_old_answers() {
        let clock = Arc::new(ManualClock::new(0));
        let (c, _) = dns("", &clock);
        c.check(ip("66.249.66.1"), 0);
        c.process_pending().await;
        assert_eq!(c.check(ip("66.249.66.1"), 0), DnsCheck::Confirmed);
        let raw: crate::config::crawlers::RawCrawlers = toml::from_str("dns_ttl = \"2h\"").unwrap();
        c.configure(&CrawlerSettings::validate(raw).unwrap());
        assert_eq!(
            c.check(ip("66.249.66.1"), 0),
            DnsCheck::Confirmed,
            "same proof"
        );
        let raw: crate::config::crawlers::RawCrawlers =
            toml::from_str("rdns_suffixes = [\".search.msn.com\"]").unwrap();
        c.configure(&CrawlerSettings::validate(raw).unwrap());
        assert_eq!(c.check(ip("66.249.66.1"), 0), DnsCheck::Pending);
    }

    #[test]
    fn the_thread_lands_checks_and_ends_on_its_token() {
        let clock = Arc::new(ManualClock::new(0));
        let (c, _) = dns("", &clock);
        let c = Arc::new(c);
        let stop = CancellationToken::new();
        let tracker = tokio_util::task::TaskTracker::new();
        let thread = c.spawn(&stop, Some(tracker.token()));
        let who = ip("66.249.66.1");
        assert_eq!(c.check(who, 0), DnsCheck::Pending);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while c.check(who, 0) != DnsCheck::Confirmed {
            assert!(std::time::Instant::now() < deadline, "never landed");
            std::thread::yield_now();
        }
        stop.cancel();
        drop(thread);
        assert!(
            tracker.is_empty(),
            "the thread ended and released the drain"
        );
    }
}
