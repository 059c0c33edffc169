//! `GET /admin/v1/crawlers`: the crawler proofs in force: the prefixes of the published ranges
//! (files and fetched lists together), and every fetched proof source (`[crawlers]
//! range_urls`, `[networks] asn_url`) with the crawler it proves, the entries in force, its
//! last fetch and outcome, and its errors since start.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::time_text::rfc3339;
use crate::admin::state::AdminState;
use crate::engine::proof_sources::FetchOutcome;

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
    Json(json!({
        "rangePrefixes": e.crawler_prefixes(),
        "sources": sources,
    }))
}
