//! The counter snapshot: the embedded store's hourly, daily, key-hourly and burst state in one
//! binary file in the state directory (`counters.snapshot`), so a restart does not hand every
//! caller a fresh hour and a fresh day. A crash loses at most one snapshot interval.
//!
//! Written atomically (temporary file, fsync, rename, as every state file) and streamed: the
//! counters are copied out one shard at a time (one short lock each), so requests never wait
//! on the disk or on more than one shard's copy. Read at start: identities with nothing counted
//! in a live window are skipped; a fixed window keeps its index, so a count from a past hour is
//! never read as the current hour's. A file that fails its checks (magic, length, SHA-256 over
//! the whole body) is set aside like any corrupt state file.
//!
//! Layout (little-endian): `MAGIC`, the records, then the record count (u64) and the SHA-256
//! of everything before it. Record: identity key (16 bytes), last seen (u32 s), hour, day and
//! key-hour windows as (index u32, used u32), burst newest slot (u32) and its 13 slot counts
//! (u16 each).

use std::io::Write;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::counters::{Counters, SHARDS};
use crate::identity::hash::IdKey;
use crate::store::count::Entry;
use crate::store::error::{CorruptFile, StoreError};
use crate::store::state_file;
use crate::store::windows::{BurstRing, Fixed, BURST_SLOTS};

pub const SNAPSHOT_FILE: &str = "counters.snapshot";

const MAGIC: &[u8; 8] = b"LIMCNT01";
const RECORD: usize = 16 + 4 + 3 * 8 + 4 + 2 * BURST_SLOTS;
const TRAILER: usize = 8 + 32;
const MAX_AGE_S: u32 = 2 * 86_400;

fn put_fixed(out: &mut Vec<u8>, f: Fixed) {
    out.extend_from_slice(&u32::from(f.index).to_le_bytes());
    out.extend_from_slice(&f.used.to_le_bytes());
}

fn encode(out: &mut Vec<u8>, id: &IdKey, e: &Entry) {
    // The file keeps 16 bytes of the key (the table keeps fewer): its format predates full digests.
    out.extend_from_slice(&id.0[..16]);
    out.extend_from_slice(&e.last_seen_s.to_le_bytes());
    for f in [e.hour, e.day, e.key_hour] {
        put_fixed(out, f);
    }
    out.extend_from_slice(&e.burst.latest.to_le_bytes());
    for c in e.burst.counts {
        out.extend_from_slice(&c.to_le_bytes());
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn decode(r: &[u8]) -> (IdKey, Entry) {
    let id = IdKey::from_prefix(&r[..16]);
    let fixed = |at| Fixed {
        // What a `Fixed` keeps of the index (16 bits; see `store::windows`).
        index: u32_at(r, at) as u16,
        used: u32_at(r, at + 4),
    };
    let mut counts = [0u16; BURST_SLOTS];
    for (i, c) in counts.iter_mut().enumerate() {
        let at = 48 + 2 * i;
        *c = u16::from_le_bytes([r[at], r[at + 1]]);
    }
    let entry = Entry {
        last_seen_s: u32_at(r, 16),
        hour: fixed(20),
        day: fixed(28),
        key_hour: fixed(36),
        burst: BurstRing {
            latest: u32_at(r, 44),
            counts,
        },
    };
    (id, entry)
}

/// Writes every identity with something counted at `now_ms` to `dir`. Returns how many.
pub fn write(dir: &Path, counters: &Counters, now_ms: u64) -> Result<usize, StoreError> {
    let mut written = 0u64;
    state_file::write_with(&dir.join(SNAPSHOT_FILE), |w| {
        let mut sha = Sha256::new();
        let mut put = |w: &mut dyn Write, bytes: &[u8]| {
            sha.update(bytes);
            w.write_all(bytes)
        };
        put(w, MAGIC)?;
        let mut buf = Vec::new();
        for i in 0..SHARDS {
            // The lock is held for the copy only; encoding and disk writes happen after.
            let entries = counters.copy_shard(i, now_ms);
            buf.clear();
            for (id, e) in &entries {
                encode(&mut buf, id, e);
            }
            put(w, &buf)?;
            written += entries.len() as u64;
        }
        put(w, &written.to_le_bytes())?;
        w.write_all(&sha.finalize())
    })?;
    Ok(usize::try_from(written).unwrap_or(usize::MAX))
}

/// Why a snapshot file was not used.
fn check(bytes: &[u8]) -> Result<&[u8], String> {
    if bytes.len() < MAGIC.len() + TRAILER || &bytes[..MAGIC.len()] != MAGIC {
        return Err("not a counter snapshot (bad header)".into());
    }
    let (body, digest) = bytes.split_at(bytes.len() - 32);
    if Sha256::digest(body).as_slice() != digest {
        return Err("checksum mismatch (torn or altered file)".into());
    }
    let (records, count) = body[MAGIC.len()..].split_at(body.len() - MAGIC.len() - 8);
    let count = u64::from_le_bytes(count.try_into().map_err(|_| "short trailer".to_string())?);
    if records.len() % RECORD != 0 || (records.len() / RECORD) as u64 != count {
        return Err(format!(
            "{} bytes of records do not hold {count} records",
            records.len()
        ));
    }
    Ok(records)
}

/// Loads the snapshot in `dir` into `counters`: identities with nothing live at `now_ms` are
/// skipped. A missing file loads nothing; a corrupt one is set aside and returned.
pub fn load(
    dir: &Path,
    counters: &Counters,
    now_ms: u64,
) -> Result<(usize, Option<CorruptFile>), StoreError> {
    let path = dir.join(SNAPSHOT_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, None)),
        Err(source) => return Err(StoreError::Read { path, source }),
    };
    let records = match check(&bytes) {
        Ok(r) => r,
        Err(why) => return Ok((0, Some(state_file::set_aside(&path, why, now_ms)?))),
    };
    let mut loaded = 0;
    let now_s = u32::try_from(now_ms / 1000).unwrap_or(u32::MAX);
    for r in records.chunks_exact(RECORD) {
        let (id, e) = decode(r);
        // Every window is a day or shorter: older than two days, nothing can be live (and a
        // 16-bit hour index could have wrapped).
        let recent = now_s.saturating_sub(e.last_seen_s) < MAX_AGE_S;
        if recent && !e.is_stale(now_ms) && counters.restore(id, e) {
            loaded += 1;
        }
    }
    Ok((loaded, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips() {
        let mut e = Entry {
            last_seen_s: 7,
            hour: Fixed { index: 1, used: 2 },
            day: Fixed { index: 3, used: 4 },
            key_hour: Fixed { index: 5, used: 6 },
            ..Entry::default()
        };
        e.burst.add(1_000_000, 9);
        let id = IdKey::from_prefix(&[3; 16]);
        let mut buf = Vec::new();
        encode(&mut buf, &id, &e);
        assert_eq!(buf.len(), RECORD);
        assert_eq!(decode(&buf), (id, e));
    }
}
