//! API key management: issue (the secret is returned once and stored only hashed), revoke
//! (takes effect in this process at once), list. Verification itself lives in
//! [`crate::identity::key_cache`].

use std::sync::Arc;

use base64::Engine as _;

use super::base::Engine;
use super::error::EngineError;
use crate::identity::key_cache::KeyCache;
use crate::model::KeyRecord;
use crate::model::Tier;
use crate::store::unreadable::{RecordKind, UnreadableRecord};

/// What to issue.
#[derive(Clone, Debug, Default)]
pub struct IssueKey {
    /// The key's own hourly units on `key_limit` routes (default from `[keys]`).
    pub hourly_limit: Option<u32>,
    /// Rung the key buys (default `sponsor`).
    pub tier: Option<Tier>,
    /// Who holds it, and anything else the operator wants kept with it (empty = none).
    pub owner: Option<String>,
    pub note: Option<String>,
}

/// A freshly issued key. `token` is the only copy of the secret: show it once.
#[derive(Clone)]
pub struct IssuedKey {
    pub token: String,
    pub record: KeyRecord,
}

impl std::fmt::Debug for IssuedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedKey")
            .field("token", &"<secret>")
            .field("record", &self.record)
            .finish()
    }
}

pub struct KeyManager<'a> {
    engine: &'a Engine,
}

impl Engine {
    pub fn keys(&self) -> KeyManager<'_> {
        KeyManager { engine: self }
    }
}

fn valid_id(id: &str) -> bool {
    id.len() == 8
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl KeyManager<'_> {
    pub fn issue(&self, req: IssueKey) -> Result<IssuedKey, EngineError> {
        let cfg = self.engine.config();
        let hourly_limit = req
            .hourly_limit
            .unwrap_or(cfg.keys.default_hourly_limit.get());
        if hourly_limit == 0 {
            return Err(EngineError::ZeroHourlyLimit);
        }
        let store = &self.engine.store;
        let mut id = None;
        for _ in 0..16 {
            let candidate = hex::encode(rand::random::<[u8; 4]>());
            if store.key(&candidate)?.is_none() {
                id = Some(candidate);
                break;
            }
        }
        let id = id.ok_or(EngineError::NoFreeKeyId)?;
        // 24 random bytes → 32 URL-safe characters.
        let secret =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 24]>());
        let record = KeyRecord {
            id: id.clone(),
            secret_hash: hex::encode(self.engine.hasher.secret_hash(&secret)),
            tier: req.tier.unwrap_or(Tier::Sponsor),
            hourly_limit,
            owner: req.owner.filter(|s| !s.is_empty()),
            note: req.note.filter(|s| !s.is_empty()),
            created_ms: self.engine.clock.now_ms(),
            revoked_ms: None,
        };
        store.put_key(record.clone())?;
        // The id and tier only: the secret is shown once, to the caller, never logged.
        tracing::info!(event = "key_issued", id = %record.id, tier = %record.tier.as_str(), hourly_limit, "API key issued");
        Ok(IssuedKey {
            token: format!("{}_{}_{}", cfg.keys.prefix, id, secret),
            record,
        })
    }

    /// Revokes `id`; `Ok(false)` when there is no such key.
    pub fn revoke(&self, id: &str) -> Result<bool, EngineError> {
        if !valid_id(id) {
            return Err(EngineError::BadKeyId { id: id.to_string() });
        }
        let store = &self.engine.store;
        let Some(mut rec) = store.key(id)? else {
            return Ok(false);
        };
        let now = self.engine.clock.now_ms();
        if rec.revoked_ms.is_none() {
            rec.revoked_ms = Some(now);
            store.put_key(rec)?;
        }
        self.engine.key_cache.invalidate(id, now);
        tracing::info!(event = "key_revoked", id, "API key revoked");
        Ok(true)
    }

    pub fn get(&self, id: &str) -> Result<Option<KeyRecord>, EngineError> {
        if !valid_id(id) {
            return Err(EngineError::BadKeyId { id: id.to_string() });
        }
        Ok(self.engine.store.key(id)?)
    }

    pub fn list(&self) -> Result<Vec<KeyRecord>, EngineError> {
        Ok(self.engine.store.keys()?)
    }

    /// The key records the store holds but cannot read (their keys do not authenticate).
    pub fn unreadable(&self) -> Result<Vec<UnreadableRecord>, EngineError> {
        Ok(self.engine.store.unreadable(RecordKind::Key)?)
    }

    /// Deletes the unreadable record of key `id` (any id text: the record may not be one
    /// this daemon wrote); `false` when there is none.
    pub fn remove_unreadable(&self, id: &str) -> Result<bool, EngineError> {
        let removed = self.engine.store.remove_unreadable(RecordKind::Key, id)?;
        if removed {
            self.engine
                .key_cache
                .invalidate(id, self.engine.clock.now_ms());
        }
        Ok(removed)
    }

    /// The verification cache (metrics: consultations, lookups).
    pub fn cache(&self) -> &Arc<KeyCache> {
        &self.engine.key_cache
    }

    /// Lands every queued lookup now; with [`super::base::KeyRefresh::Manual`] this is the only way.
    pub fn process_pending(&self) -> usize {
        self.engine
            .key_cache
            .process_pending(self.engine.clock.now_ms())
    }
}
