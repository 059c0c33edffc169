//! The fleet's hashing secret when none is configured (`hash = "hmac"`): one secret for every
//! host, kept in Valkey (`<prefix>hash-secret`) **and** in each host's `<state_dir>/fleet-secret`
//! (0600), so a Valkey that lost its data gets the secret back from the first host to connect
//! instead of a fresh one splitting the fleet's counts. A process hashes with one secret for
//! its whole life, chosen before it connects; at connect the two copies are reconciled
//! ([`settle`]), and a disagreement is logged loudly and counted, never silently resolved.

use std::path::Path;

use super::conn::{check, err, Conn};
use crate::store::error::StoreError;
use crate::store::state_file;

/// A secret as stored (hex), or why not.
pub fn decode(text: &str) -> Result<Vec<u8>, StoreError> {
    hex::decode(text.trim())
        .ok()
        .filter(|b| b.len() >= 16)
        .ok_or_else(|| err("secret", "stored hash secret is not hex of 16+ bytes"))
}

pub fn fresh() -> Vec<u8> {
    rand::random::<[u8; 32]>().to_vec()
}

/// The local copy, if there is one.
pub fn read_local(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    match std::fs::read_to_string(path) {
        Ok(text) => decode(&text).map(Some).map_err(|_| {
            err(
                "secret",
                format!("{}: not hex of 16+ bytes", path.display()),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StoreError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Writes the local copy, readable by the daemon's user only (written aside, then renamed, so
/// a crash never leaves half a secret).
pub fn write_local(path: &Path, secret: &[u8]) -> Result<(), StoreError> {
    if let Some(dir) = path.parent() {
        state_file::private_dir(dir)?;
        state_file::remove_stale_temps(dir);
    }
    // The state files' one writer: a new temporary file, never a followed symlink.
    state_file::write_bytes(path, hex::encode(secret).as_bytes())
}

/// Valkey's copy, if any.
pub async fn fetch(conn: &mut Conn, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
    let got: Option<String> = check("secret", redis::cmd("GET").arg(key).query_async(conn).await)?;
    got.as_deref().map(decode).transpose()
}

/// At connect: writes `ours` into an empty Valkey; returns Valkey's copy when it differs from
/// `ours` (the caller logs and counts it, and keeps hashing with `ours`).
pub async fn settle(
    conn: &mut Conn,
    key: &str,
    ours: &[u8],
) -> Result<Option<Vec<u8>>, StoreError> {
    check(
        "secret",
        redis::cmd("SET")
            .arg(key)
            .arg(hex::encode(ours))
            .arg("NX")
            .exec_async(conn)
            .await,
    )?;
    let theirs = fetch(conn, key)
        .await?
        .ok_or_else(|| err("secret", "the hash secret vanished right after SET NX"))?;
    Ok((theirs != ours).then_some(theirs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn the_local_copy_is_private_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/fleet-secret");
        assert_eq!(read_local(&path).unwrap(), None);
        let s = fresh();
        write_local(&path, &s).unwrap();
        assert_eq!(read_local(&path).unwrap(), Some(s));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(&path, "zz").unwrap();
        assert!(read_local(&path).is_err());
    }
}
