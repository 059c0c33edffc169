//! Reading a record back from Valkey: JSON of its type within the bounds a daemon writes
//! ([`crate::store::unreadable`]), one record at a time, so one that does not read is skipped
//! (noted once, counted) and never fails the call that met it. Also the admin API's view of
//! those records: listed now, and deleted by raw name only while they still do not read.

use super::conn::check;
use super::inner::Inner;
use crate::model::{KeyRecord, Lockout, StrikeRecord};
use crate::store::error::StoreError;
use crate::store::unreadable::{check_list_entry, check_lockout, RecordKind, UnreadableRecord};

/// How a record read back must be: JSON of `T` within `T`'s bounds.
pub(super) trait Record: serde::de::DeserializeOwned {
    const KIND: RecordKind;
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

impl Record for Lockout {
    const KIND: RecordKind = RecordKind::Lockout;
    fn check(&self) -> Result<(), String> {
        check_lockout(self)
    }
}

impl Record for StrikeRecord {
    const KIND: RecordKind = RecordKind::Strikes;
}

impl Record for KeyRecord {
    const KIND: RecordKind = RecordKind::Key;
}

/// `b` as a record of `kind`, or the record as skipped (never its value: the error says why).
pub(super) fn parse<T: serde::de::DeserializeOwned>(
    kind: RecordKind,
    key: &str,
    field: Option<&str>,
    b: &[u8],
    bounds: impl Fn(&T) -> Result<(), String>,
) -> Result<T, UnreadableRecord> {
    let skipped = |error: String| UnreadableRecord {
        kind,
        key: key.to_string(),
        field: field.map(str::to_string),
        id: None,
        error,
    };
    let v: T = serde_json::from_slice(b).map_err(|e| skipped(e.to_string()))?;
    bounds(&v).map_err(skipped)?;
    Ok(v)
}

impl Inner {
    /// The record at `key`, `Ok(None)` when absent or unreadable (noted, and skipped).
    pub(super) async fn get_json<T: Record>(
        &self,
        op: &'static str,
        key: &str,
    ) -> Result<Option<T>, StoreError> {
        Ok(self.get_raw::<T>(op, key).await?.unwrap_or_else(|r| {
            self.unreadable.found(&r);
            None
        }))
    }

    /// The record at `key`: absent, read, or unreadable.
    pub(super) async fn get_raw<T: Record>(
        &self,
        op: &'static str,
        key: &str,
    ) -> Result<Result<Option<T>, UnreadableRecord>, StoreError> {
        let mut c = self.conn(op)?;
        let body: Option<Vec<u8>> =
            check(op, redis::cmd("GET").arg(key).query_async(&mut c).await)?;
        Ok(body
            .map(|b| parse(T::KIND, key, None, &b, T::check))
            .transpose())
    }

    /// The unreadable records of `kind`, read now.
    pub(super) async fn unreadable_now(
        &self,
        kind: RecordKind,
    ) -> Result<Vec<UnreadableRecord>, StoreError> {
        Ok(match kind {
            RecordKind::List(k) => self.list_read(k).await?.1,
            RecordKind::Key => self.keys_read().await?.1,
            RecordKind::Lockout => self.lockouts_read().await?.1,
            RecordKind::Strikes | RecordKind::Stream => Vec::new(),
        })
    }

    /// Deletes the record of `kind` named `name` if, and only if, it is unreadable: a list's
    /// raw field, a key's id, a lockout's whole key.
    pub(super) async fn remove_unreadable(
        &self,
        kind: RecordKind,
        name: &str,
    ) -> Result<bool, StoreError> {
        let op = "remove_unreadable";
        let mut c = self.conn(op)?;
        let found = match kind {
            RecordKind::List(k) => {
                let key = self.layout.list(k);
                let body: Option<Vec<u8>> = check(
                    op,
                    redis::cmd("HGET")
                        .arg(&key)
                        .arg(name)
                        .query_async(&mut c)
                        .await,
                )?;
                match body.map(|b| parse(kind, &key, Some(name), &b, check_list_entry)) {
                    Some(Err(r)) => {
                        check(
                            op,
                            redis::cmd("HDEL")
                                .arg(&key)
                                .arg(name)
                                .exec_async(&mut c)
                                .await,
                        )?;
                        Some(r)
                    }
                    _ => None,
                }
            }
            RecordKind::Key => self.key_at(&self.layout.key_record(name)).await?.err(),
            RecordKind::Lockout if name.starts_with(&self.layout.name("lockout:")) => {
                self.get_raw::<Lockout>(op, name).await?.err()
            }
            _ => None,
        };
        let Some(r) = found else { return Ok(false) };
        if r.field.is_none() {
            check(op, redis::cmd("DEL").arg(&r.key).exec_async(&mut c).await)?;
        }
        self.unreadable.forget(&r);
        tracing::info!(kind = kind.as_str(), key = %r.name(), "unreadable record deleted");
        Ok(true)
    }
}
