//! `GET /admin/v1/crawlers`: the crawler proofs in force: the prefixes of the published ranges
//! (files and fetched lists together), and every fetched proof source (`[crawlers]
//! range_urls`, `[networks] asn_url`) with the crawler it proves, the entries in force, its
//! last fetch and outcome, and its errors since start; and the signed agents' key directories
//! held (the first [`MAX_DIRECTORIES`] by URL) with their keys and last fetch error.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::time_text::rfc3339;
use crate::admin::state::AdminState;
use crate::fetch::proof_sources::FetchOutcome;

/// Directories listed at most (the cache holds up to 4,096; a page of them is enough to see
/// whether fetching works).
pub const MAX_DIRECTORIES: usize = 100;

pub async fn show(State(state): State<AdminState>) -> Json<Value> {
    let e = &state.engine;
    let sources: Vec<Value> = e
        .proof_sources()
        .iter()
        .map(|s| {
            let fetches: serde_json::Map<String, Value> = FetchOutcome::ALL
                .iter()
                .zip(s.fetches)
                .map(|(o, n)| (o.as_str().to_string(), json!(n)))
                .collect();
            json!({
                "url": s.url,
                "kind": s.kind,
                "crawler": s.crawler,
                "entries": s.entries,
                "dataFetchedAt": s.data_fetched_ms.map(rfc3339),
                "fromDisk": s.from_disk,
                "lastFetchAt": s.last_fetch_ms.map(rfc3339),
                "lastOutcome": s.last_outcome.map(FetchOutcome::as_str),
                "lastError": s.last_error,
                "errors": s.errors(),
                "fetches": fetches,
            })
        })
        .collect();
    let held = e.agent_directories().summary();
    let directories: Vec<Value> = held
        .iter()
        .take(MAX_DIRECTORIES)
        .map(|(url, keys, error)| {
            json!({
                "url": url,
                "keys": keys,
                "state": match (keys, error) {
                    (_, Some(_)) => "failing",
                    (0, None) => "pending",
                    _ => "ok",
                },
                "lastError": error,
            })
        })
        .collect();
    Json(json!({
        "rangePrefixes": e.crawler_prefixes(),
        "sources": sources,
        "directories": directories,
        "directoriesHeld": held.len(),
    }))
}
