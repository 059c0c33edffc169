//! Crawlers in the engine: a claiming caller's DNS lookup is asked for once its request is
//! admitted ([`Engine::crawler_lookup`]), and the published crawler ranges are kept current
//! while the daemon runs: the files named by
//! `[crawlers] range_files` are checked every `range_poll` (size and modification time, off the
//! request path) and re-read when they changed. A file that no longer parses keeps the ranges
//! in force and is reported once per change (log and metric), never applied in part.
//!
//! A reload of the whole config reads the files itself (they are part of its validation), so
//! a refresh that raced with one is dropped rather than put back over it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::base::{Engine, Runtime};
pub use super::range_reloads::RangeReloads;
use crate::config::crawler_ranges::{self, FileStamp};
use crate::identity::{Caller, IdentityResolver};
use crate::model::{Action, CrawlerStatus, Decision};

/// What one poll did.
#[derive(Debug, PartialEq, Eq)]
pub enum RangeRefresh {
    /// No file changed since it was read (or the last failure was already reported).
    Unchanged,
    /// Re-read; this many prefixes are in force now.
    Applied(usize),
    /// A file changed and does not load; the old ranges stay.
    Failed(String),
}

impl Engine {
    /// After decision `d` on `caller`: a claiming crawler whose DNS answer is due is looked up
    /// now, only if the request was admitted (a refused or locked caller buys no query), and
    /// within the lookup bounds ([`crate::identity::crawler_dns`]).
    pub(crate) fn crawler_lookup(&self, caller: &Caller, d: &Decision, now_ms: u64) {
        let claimed = matches!(
            caller.crawler,
            Some(CrawlerStatus::Pending | CrawlerStatus::Dns | CrawlerStatus::Fake)
        );
        if claimed && d.action() != Action::Reject {
            self.crawler_dns
                .request_if_due(caller.ip, caller.group, now_ms);
        }
    }

    /// Prefixes of the published ranges in force (range files, and lists fetched from
    /// `range_urls`).
    pub fn crawler_prefixes(&self) -> usize {
        self.with_runtime(|rt| rt.cfg.crawlers.ranges.set.len() + rt.cfg.crawlers.fetched.len())
    }

    /// The range files' re-reads, and the reverse-DNS lookups' results.
    pub fn crawler_stats(
        &self,
    ) -> (
        &RangeReloads,
        &crate::identity::crawler_dns::DnsStats,
        (usize, usize),
    ) {
        (
            &self.crawler_ranges,
            &self.crawler_dns.stats,
            self.crawler_dns.held(),
        )
    }

    /// Re-reads the range files if any changed on disk since they were read. `reported`
    /// holds the stamps of the last failure, so a broken file is reported once, not every
    /// poll.
    pub fn refresh_crawler_ranges(&self, reported: &mut Option<Vec<FileStamp>>) -> RangeRefresh {
        let rt = self.runtime();
        let files = &rt.cfg.crawlers.range_files;
        if files.is_empty() {
            return RangeRefresh::Unchanged;
        }
        let now = crawler_ranges::stamps(files);
        if now == rt.cfg.crawlers.ranges.stamps || reported.as_ref() == Some(&now) {
            return RangeRefresh::Unchanged;
        }
        match crawler_ranges::load(files) {
            Ok(ranges) => {
                let n = ranges.set.len();
                let mut cfg = (*rt.cfg).clone();
                cfg.crawlers.ranges = Arc::new(ranges);
                let cfg = Arc::new(cfg);
                let resolver = Arc::new(IdentityResolver::with_crawler_dns(
                    &cfg,
                    Some(Arc::clone(&self.crawler_dns)),
                ));
                let mut raced = false;
                self.replace_runtime(|old| {
                    if Arc::ptr_eq(&old.cfg, &rt.cfg) {
                        Runtime {
                            cfg,
                            resolver,
                            lists: Arc::clone(&old.lists),
                        }
                    } else {
                        // A config reload came first and read the files itself.
                        raced = true;
                        Runtime {
                            cfg: Arc::clone(&old.cfg),
                            resolver: Arc::clone(&old.resolver),
                            lists: Arc::clone(&old.lists),
                        }
                    }
                });
                if raced {
                    return RangeRefresh::Unchanged;
                }
                *reported = None;
                self.crawler_ranges.applied.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    event = "crawler_ranges_reloaded",
                    prefixes = n,
                    "crawler range files changed on disk; re-read"
                );
                RangeRefresh::Applied(n)
            }
            Err(err) => {
                *reported = Some(now);
                self.crawler_ranges.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    event = "crawler_ranges_refused",
                    error = %err,
                    "a crawler range file changed and does not load; the previous ranges stay in force"
                );
                RangeRefresh::Failed(err.to_string())
            }
        }
    }
}

/// Polls the range files every `[crawlers] range_poll` (read anew each round: a reload may
/// change it) until `stop` is cancelled. The reads are small files on a blocking thread.
pub async fn watch_ranges(engine: Arc<Engine>, stop: CancellationToken) {
    let mut reported = None;
    loop {
        let every = engine.with_runtime(|rt| rt.cfg.crawlers.range_poll);
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let e = Arc::clone(&engine);
        let mut r = reported.take();
        let polled = tokio::task::spawn_blocking(move || {
            e.refresh_crawler_ranges(&mut r);
            r
        })
        .await;
        match polled {
            Ok(r) => reported = r,
            Err(err) => tracing::warn!(error = %err, "crawler range poll failed"),
        }
    }
}
