//! The task that keeps the fetched proofs current, off the request path: every source of
//! [`super::proof_sources`] is fetched when due (at start, then every `[crawlers] refresh`,
//! jittered; sooner after a failure) with the validators of the copy held, so an unchanged
//! list costs a 304. A new body is parsed on a blocking thread, written to disk as the last
//! good copy, and put in force by the [`Holder`] (the engine, which swaps its runtime whole as
//! a reload does): a decision sees the old ranges or the new ones, never a mix. A failure (no answer, a status
//! other than 200/304, oversize, a body that does not parse) is logged and counted, and the
//! old data stays in force.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::https::{self, Conditional, FetchOptions, Validators};
use super::proof_disk::{self, Meta};
use super::proof_parse::{self, SourceKind};
use super::proof_sources::{next_wait, FetchOutcome, ProofSources, SourceSpec};
use crate::config::proof_sources::SourceFetch;
use crate::config::Config;

/// Test only: every source is fetched this often (ms) instead of `[crawlers] refresh`.
pub const TEST_REFRESH_ENV: &str = "LIMITER_TEST_PROOF_REFRESH_MS";

/// The longest the loop sleeps before it looks at the config again (a reload may add a source).
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// What the loop needs from the engine that holds the proofs (implemented there: the engine
/// sits above this room).
pub trait Holder: Send + Sync {
    fn config(&self) -> Arc<Config>;
    fn proofs(&self) -> &ProofSources;
    fn now_ms(&self) -> u64;
    /// Puts the proof sources' last good data in force.
    fn apply_proofs(&self);
}

/// The fetcher settings for `kind` (the trust and allow list of `fetch`).
fn options(base: &FetchOptions, kind: &SourceKind) -> FetchOptions {
    let mut o = base.clone();
    o.max_body = kind.max_body();
    match kind {
        SourceKind::Ranges { .. } => {
            o.accept = "application/json";
            o.timeout = Duration::from_secs(30);
        }
        SourceKind::Asn => {
            o.accept = "*/*";
            o.timeout = Duration::from_secs(180);
        }
    }
    o
}

fn base_options(fetch: &SourceFetch) -> Result<FetchOptions, String> {
    FetchOptions::new(
        Duration::from_secs(30),
        proof_parse::MAX_RANGE_LIST_BYTES,
        fetch.allow.clone(),
        "application/json",
        fetch.ca_file.as_deref(),
    )
}

/// Fetches every source when due until `stop`.
pub async fn run<H: Holder>(engine: Arc<H>, stop: CancellationToken) {
    let test_refresh = std::env::var(TEST_REFRESH_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_millis);
    let mut built: Option<(SourceFetch, Result<FetchOptions, String>)> = None;
    loop {
        let cfg = engine.config();
        let fetch = &cfg.crawlers.sources;
        if built.as_ref().is_none_or(|(f, _)| f != fetch) {
            built = Some((fetch.clone(), base_options(fetch)));
        }
        let refresh = test_refresh.unwrap_or(fetch.refresh);
        let base = built.as_ref().map(|(_, o)| o.clone()).expect("built above");
        for (spec, held) in engine.proofs().due(Instant::now()) {
            // A stop does not wait for a slow download (the ASN table may take minutes).
            tokio::select! {
                () = stop.cancelled() => return,
                () = fetch_one(&engine, &spec, &held, &base, refresh) => {}
            }
        }
        let wait = match engine.proofs().next_due() {
            Some(Some(at)) => at.saturating_duration_since(Instant::now()),
            Some(None) => Duration::ZERO,
            None => LOOK_AGAIN,
        }
        .min(LOOK_AGAIN);
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

async fn fetch_one<H: Holder>(
    engine: &Arc<H>,
    spec: &SourceSpec,
    held: &Validators,
    base: &Result<FetchOptions, String>,
    refresh: Duration,
) {
    let answer = match base {
        Ok(base) => https::get_if_changed(&spec.url, &options(base, &spec.kind), held).await,
        Err(e) => Err(format!("crawlers.ca_file: {e}")),
    };
    let now_ms = engine.now_ms();
    let outcome = match answer {
        Err(e) => Err((FetchOutcome::Failed, e)),
        Ok(Conditional::NotModified) => Ok(None),
        Ok(Conditional::Fresh(r)) => {
            let (spec2, dir) = (spec.clone(), engine.proofs().state_dir());
            tokio::task::spawn_blocking(move || {
                let parsed = proof_parse::parse(&spec2.kind, &spec2.url, &r.body)?;
                let meta = Meta {
                    url: spec2.url.clone(),
                    validators: r.validators.clone(),
                    fetched_ms: now_ms,
                };
                if let Err(error) = proof_disk::write(&dir, &meta, &r.body) {
                    // In force anyway; only the next start without network misses it.
                    tracing::warn!(url = %spec2.url, %error, "proof source: cannot keep the copy on disk");
                }
                Ok((parsed, r.validators))
            })
            .await
            .unwrap_or_else(|e| Err(format!("parse task: {e}")))
            .map(Some)
            .map_err(|e| (FetchOutcome::Refused, e))
        }
    };
    match &outcome {
        Ok(Some((p, _))) => tracing::info!(
            event = "proof_source_updated",
            url = %spec.url,
            kind = spec.kind.as_str(),
            entries = p.entries(),
            "proof source fetched; the new list is in force"
        ),
        Ok(None) => tracing::debug!(url = %spec.url, "proof source unchanged (304)"),
        Err((kind, error)) => tracing::warn!(
            event = "proof_source_failed",
            url = %spec.url,
            outcome = kind.as_str(),
            %error,
            "proof source fetch failed; the previous list stays in force"
        ),
    }
    let failed = outcome.is_err();
    let next = Instant::now() + next_wait(refresh, failed);
    if engine.proofs().record(spec, outcome, now_ms, next) {
        engine.apply_proofs();
    }
}
