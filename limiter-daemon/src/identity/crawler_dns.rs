//! The reverse-DNS proof of crawlers, answered from memory and looked up behind the request,
//! like API keys ([`super::key_cache`]):
//!
//! - Answers are kept per caller the way identities are: the (grouped) address, so an IPv6
//!   caller's /64 (`[identity] ipv6_prefix`) is one answer and one lookup, whichever of its
//!   addresses asks.
//! - Reading the cache ([`CrawlerDns::peek`]) never queues anything: a caller not yet checked
//!   answers [`DnsCheck::Pending`] (metered as what it otherwise is). The engine asks for the
//!   lookup ([`CrawlerDns::request`]) only once the request is admitted, so a caller refused
//!   or locked out buys no query.
//! - Checks in flight are bounded (`crawlers.dns_max_in_flight`), and so are the lookups each
//!   network may cause (`crawlers.dns_lookups_per_network` an hour, per `[networks]` prefix:
//!   IPv4 /24, IPv6 /48 by default): past either bound nothing is queued and the caller stays
//!   pending, so a flood of fake Googlebots from many addresses buys a bounded number of
//!   lookups. Not asked lookups are counted ([`DnsStats`]).
//! - Answers are kept for `dns_ttl` (confirmed) or `dns_negative_ttl` (refuted or failed),
//!   then served stale while they are checked again. At most `dns_cache_capacity` callers are
//!   held; past it expired answers go first, then confirmed ones (oldest first; a real crawler
//!   costs one more lookup), and refuted ones last, so a fake is not asked again before its
//!   negative TTL while anything else can give way.
//!
//! The checks run on a thread of their own with a small Tokio runtime ([`CrawlerDns::spawn`]),
//! so an engine built outside any runtime (tests, benches, library users) works the same. The
//! thread ends on a cancellation token, and holds a task tracker open until it has ended, as
//! the key cache's does. Only the user agents that claim a crawler ever reach this cache.

use crate::owned_thread::OwnedThread;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::task_tracker::TaskTrackerToken;

use ipnet::IpNet;

use super::crawler_fcrdns::{self, Dns, Fcrdns, HickoryDns};
use crate::clock::Clock;
use crate::config::{CrawlerSettings, NetworkSettings};

/// The span of a network's lookup budget (`dns_lookups_per_network` per hour).
const BUDGET_SPAN_MS: u64 = 3_600_000;

/// The cache's answer for an address whose user agent claims a crawler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnsCheck {
    Confirmed,
    /// No name under a suffix resolves back to the address (or the lookup failed).
    Refuted,
    /// Not checked yet; a check is queued.
    Pending,
    /// Not checked yet, and a bound (checks in flight, the network's lookups) is reached:
    /// nothing queued.
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
    /// Lookups one network may cause per [`BUDGET_SPAN_MS`].
    per_network: u32,
    /// A network's prefix lengths (`[networks]`).
    ipv4_net: u8,
    ipv6_net: u8,
}

impl Setup {
    fn of(s: &CrawlerSettings, n: &NetworkSettings) -> Self {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Setup {
            suffixes: s.rdns_suffixes.clone(),
            server: s.resolver,
            timeout: s.dns_timeout,
            ttl_ms: ms(s.dns_ttl),
            negative_ttl_ms: ms(s.dns_negative_ttl),
            capacity: s.dns_cache_capacity.get(),
            max_in_flight: s.dns_max_in_flight.get() as usize,
            per_network: s.dns_lookups_per_network.get(),
            ipv4_net: n.ipv4_prefix,
            ipv6_net: n.ipv6_prefix,
        }
    }

    /// The network whose lookup budget `key` spends.
    fn network(&self, key: IpAddr) -> IpNet {
        let key = key.to_canonical();
        let len = match key {
            IpAddr::V4(_) => self.ipv4_net,
            IpAddr::V6(_) => self.ipv6_net,
        };
        IpNet::new(key, len).map_or(IpNet::from(key), |n| n.trunc())
    }

    /// Whether answers made under `self` still hold under `other`.
    fn same_proof(&self, other: &Setup) -> bool {
        self.suffixes == other.suffixes && self.server == other.server
    }
}

/// Lookups a network caused in its current budget span.
#[derive(Clone, Copy, Debug)]
struct Budget {
    since_ms: u64,
    spent: u32,
}

#[derive(Default)]
struct Queue {
    /// Callers (grouped addresses) queued or being checked.
    pending: HashSet<IpAddr>,
    /// (address to look up, the caller it answers for).
    order: VecDeque<(IpAddr, IpAddr)>,
    /// Each network's lookups this span; at most `dns_cache_capacity` networks are held.
    budgets: HashMap<IpNet, Budget>,
}

/// Lookup results since start, and lookups not asked, read by the metrics.
#[derive(Debug, Default)]
pub struct DnsStats {
    pub confirmed: AtomicU64,
    pub refuted: AtomicU64,
    pub failed: AtomicU64,
    /// Not asked: `dns_max_in_flight` checks were queued or running.
    pub skipped_in_flight: AtomicU64,
    /// Not asked: the caller's network had spent `dns_lookups_per_network`.
    pub skipped_network: AtomicU64,
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
    /// `networks`: whose prefixes the lookup budgets are counted by.
    pub fn new(
        settings: &CrawlerSettings,
        networks: &NetworkSettings,
        clock: Arc<dyn Clock>,
    ) -> Self {
        CrawlerDns {
            answers: RwLock::new(HashMap::new()),
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
            setup: RwLock::new(Arc::new(Setup::of(settings, networks))),
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
    pub fn configure(&self, settings: &CrawlerSettings, networks: &NetworkSettings) {
        let new = Arc::new(Setup::of(settings, networks));
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

    /// The cached answer for caller `key` (a grouped address) at `now_ms`, and whether a
    /// lookup is due (none yet, or the answer outlived its TTL: it is served meanwhile).
    /// Queues nothing and never waits for DNS.
    pub fn peek(&self, key: IpAddr, now_ms: u64) -> (DnsCheck, bool) {
        let setup = Arc::clone(&self.setup.read());
        let cached = self.answers.read().get(&key).copied();
        match cached {
            None => (DnsCheck::Pending, true),
            Some(a) => {
                let (answer, ttl) = if a.confirmed {
                    (DnsCheck::Confirmed, setup.ttl_ms)
                } else {
                    (DnsCheck::Refuted, setup.negative_ttl_ms)
                };
                (answer, now_ms.saturating_sub(a.at_ms) >= ttl)
            }
        }
    }

    /// Queues a lookup of `addr` answering for caller `key` if one is due at `now_ms`, within
    /// the bounds (checks in flight, the network's lookups). `true`: queued, or in flight
    /// already, or not due.
    pub fn request_if_due(&self, addr: IpAddr, key: IpAddr, now_ms: u64) -> bool {
        if !self.enabled() || !self.peek(key, now_ms).1 {
            return true;
        }
        self.request(addr, key, now_ms)
    }

    /// [`Self::peek`] then, when a lookup is due, [`Self::request`]: the answer for `ip` as its
    /// own caller (`Deferred` when a bound kept a first lookup from being queued).
    pub fn check(&self, ip: IpAddr, now_ms: u64) -> DnsCheck {
        let (answer, due) = self.peek(ip, now_ms);
        if !due {
            return answer;
        }
        let queued = self.request(ip, ip, now_ms);
        match answer {
            DnsCheck::Pending if !queued => DnsCheck::Deferred,
            // A refresh refused by a bound keeps serving the cached answer.
            answer => answer,
        }
    }

    /// Queues a lookup of `addr` for caller `key`; `false` when a bound refused it.
    /// A confirmed crawler's refresh spends no network budget (only a real crawler is ever
    /// confirmed, so a fake cannot make refreshes happen).
    pub fn request(&self, addr: IpAddr, key: IpAddr, now_ms: u64) -> bool {
        let setup = Arc::clone(&self.setup.read());
        let refresh = self.answers.read().get(&key).is_some_and(|a| a.confirmed);
        let mut q = self.queue.lock();
        if q.pending.contains(&key) {
            return true;
        }
        if q.pending.len() >= setup.max_in_flight {
            self.stats.skipped_in_flight.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if !refresh {
            let net = setup.network(key);
            if !q.budgets.contains_key(&net) && q.budgets.len() >= setup.capacity {
                prune_budgets(&mut q.budgets, setup.capacity, now_ms);
            }
            let b = q.budgets.entry(net).or_insert(Budget {
                since_ms: now_ms,
                spent: 0,
            });
            if now_ms.saturating_sub(b.since_ms) >= BUDGET_SPAN_MS {
                *b = Budget {
                    since_ms: now_ms,
                    spent: 0,
                };
            }
            if b.spent >= setup.per_network {
                self.stats.skipped_network.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            b.spent += 1;
        }
        q.pending.insert(key);
        q.order.push_back((addr, key));
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

    /// Checks address `ip` and stores the answer for caller `key`.
    async fn settle(&self, ip: IpAddr, key: IpAddr) {
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
                if answers.len() >= setup.capacity && !answers.contains_key(&key) {
                    evict(&mut answers, &setup, now);
                }
                answers.insert(
                    key,
                    Answer {
                        confirmed,
                        at_ms: now,
                    },
                );
            }
        }
        let mut q = self.queue.lock();
        q.pending.remove(&key);
    }

    /// Runs every queued check now, concurrently, and returns how many ran (tests; the
    /// lookup thread runs [`CrawlerDns::run`]).
    pub async fn process_pending(&self) -> usize {
        let batch: Vec<(IpAddr, IpAddr)> = self.queue.lock().order.drain(..).collect();
        let n = batch.len();
        futures_util::future::join_all(batch.into_iter().map(|(ip, key)| self.settle(ip, key)))
            .await;
        n
    }

    /// Lands queued checks until `stop` is cancelled; each check runs as its own task, at most
    /// `dns_max_in_flight` of them (the queue's bound).
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            let next: Vec<(IpAddr, IpAddr)> = self.queue.lock().order.drain(..).collect();
            for (ip, key) in next {
                let me = Arc::clone(&self);
                tasks.spawn(async move { me.settle(ip, key).await });
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

/// Makes room for an answer: expired answers go first; if that frees nothing, an eighth of the
/// capacity goes (so a full cache does not scan per insert), confirmed answers oldest first,
/// then refuted ones oldest first: a refuted answer is kept for its negative TTL while
/// anything else can give way.
fn evict(answers: &mut HashMap<IpAddr, Answer>, setup: &Setup, now: u64) {
    answers.retain(|_, a| {
        let ttl = if a.confirmed {
            setup.ttl_ms
        } else {
            setup.negative_ttl_ms
        };
        now.saturating_sub(a.at_ms) < ttl
    });
    if answers.len() < setup.capacity {
        return;
    }
    let excess = answers.len() + 1 - setup.capacity;
    let room = excess.max(setup.capacity / 8).min(answers.len());
    let mut order: Vec<(bool, u64, IpAddr)> = answers
        .iter()
        .map(|(k, a)| (!a.confirmed, a.at_ms, *k))
        .collect();
    // Confirmed (`false`) before refuted (`true`), each oldest first.
    order.select_nth_unstable(room - 1);
    for (_, _, k) in &order[..room] {
        answers.remove(k);
    }
}

/// Makes room for a network's budget: spans over first; then the oldest spans, an eighth of
/// `capacity` at once.
fn prune_budgets(budgets: &mut HashMap<IpNet, Budget>, capacity: usize, now: u64) {
    budgets.retain(|_, b| now.saturating_sub(b.since_ms) < BUDGET_SPAN_MS);
    if budgets.len() < capacity {
        return;
    }
    let room = (budgets.len() + 1 - capacity)
        .max(capacity / 8)
        .min(budgets.len());
    let mut order: Vec<(u64, IpNet)> = budgets.iter().map(|(n, b)| (b.since_ms, *n)).collect();
    order.select_nth_unstable(room - 1);
    for (_, n) in &order[..room] {
        budgets.remove(n);
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
        let c = CrawlerDns::new(&settings, &nets(), Arc::clone(clock) as _)
            .with_dns(Arc::clone(&table) as _);
        (c, table)
    }

    fn nets() -> NetworkSettings {
        crate::config::Config::default().networks
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
        c.configure(&CrawlerSettings::validate(raw).unwrap(), &nets());
        assert_eq!(
            c.check(ip("66.249.66.1"), 0),
            DnsCheck::Confirmed,
            "same proof"
        );
        let raw: crate::config::crawlers::RawCrawlers =
            toml::from_str("rdns_suffixes = [\".search.msn.com\"]").unwrap();
        c.configure(&CrawlerSettings::validate(raw).unwrap(), &nets());
        assert_eq!(c.check(ip("66.249.66.1"), 0), DnsCheck::Pending);
    }

    /// Issue 21 P7: one lookup per caller the way identities are grouped (an IPv6 /64), and
    /// a network's lookups bounded per hour; a confirmed crawler's refresh spends none of it.
    #[tokio::test]
    async fn lookups_are_one_per_caller_and_bounded_per_network() {
        let clock = Arc::new(ManualClock::new(0));
        let (c, table) = dns("dns_lookups_per_network = 3\n", &clock);
        // 300 addresses of one /64, all the caller 2001:db8:1:2::.
        let key = ip("2001:db8:1:2::");
        for i in 0..300u16 {
            let addr = std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0, 0, 0, i);
            assert!(c.request_if_due(IpAddr::V6(addr), key, 0));
        }
        assert_eq!(c.process_pending().await, 1, "one lookup for the /64");
        assert_eq!(c.peek(key, 0), (DnsCheck::Refuted, false));
        // Ten /24 addresses: three lookups, the rest not asked (and counted).
        let queued = (1..=10)
            .filter(|i| {
                c.request_if_due(
                    ip(&format!("66.249.66.{i}")),
                    ip(&format!("66.249.66.{i}")),
                    0,
                )
            })
            .count();
        assert_eq!(queued, 3);
        assert_eq!(c.stats.skipped_network.load(Ordering::Relaxed), 7);
        assert!(
            c.request_if_due(ip("66.249.67.1"), ip("66.249.67.1"), 0),
            "another /24"
        );
        assert_eq!(c.process_pending().await, 4);
        assert_eq!(table.0.load(Ordering::Relaxed), 5, "PTR lookups in all");
        assert_eq!(c.peek(ip("66.249.66.1"), 0), (DnsCheck::Confirmed, false));
        // Past the positive TTL, the confirmed crawler's refresh is asked although the /24's
        // budget is spent; a new address of it is not, until the hour has passed.
        let later = 3_600_000 - 1;
        assert!(c.request_if_due(ip("66.249.66.1"), ip("66.249.66.1"), later + 1));
        assert!(!c.request_if_due(ip("66.249.66.9"), ip("66.249.66.9"), later));
        assert!(c.request_if_due(ip("66.249.66.9"), ip("66.249.66.9"), later + 1));
    }

    /// Issue 21 P7: past `dns_cache_capacity`, refuted answers are the last evicted, so a fake
    /// is not asked again before its negative TTL while confirmed answers can give way.
    #[tokio::test]
    async fn past_capacity_refuted_answers_are_evicted_last() {
        let clock = Arc::new(ManualClock::new(0));
        let (c, table) = dns("dns_cache_capacity = 8\n", &clock);
        // Four fakes (even last octets), then twenty crawlers (odd), one /24 each.
        for i in 0..4 {
            c.check(ip(&format!("203.0.{i}.2")), 0);
        }
        c.process_pending().await;
        for i in 0..20 {
            c.check(ip(&format!("198.18.{i}.1")), 0);
            c.process_pending().await;
        }
        let asked = table.0.load(Ordering::Relaxed);
        assert_eq!(asked, 24);
        assert!(c.held().0 <= 8, "{:?}", c.held());
        // Every fake still answers refuted, from memory: 500 repeats, no new lookup.
        for round in 0..125 {
            for i in 0..4 {
                assert_eq!(
                    c.check(ip(&format!("203.0.{i}.2")), round),
                    DnsCheck::Refuted
                );
            }
        }
        assert_eq!(c.process_pending().await, 0);
        assert_eq!(
            table.0.load(Ordering::Relaxed),
            asked,
            "no fake asked again"
        );
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
