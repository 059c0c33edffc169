//! State files: written atomically (temporary file, fsync, rename) and read defensively — a
//! file that does not parse is reported and renamed aside (`<name>.corrupt-<ms>`) so the daemon
//! starts with that part empty instead of refusing to start or silently overwriting evidence.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::error::{CorruptFile, StoreError};

/// Writes `value` as JSON to `path` atomically.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|source| StoreError::Encode {
        path: path.to_path_buf(),
        source,
    })?;
    write_bytes(path, &bytes, false)
}

/// Writes bytes atomically; `private` makes the file readable by its owner only.
pub fn write_bytes(path: &Path, bytes: &[u8], private: bool) -> Result<(), StoreError> {
    write_with(path, private, |w| w.write_all(bytes))
}

/// Writes what `fill` produces atomically, streamed through a buffer (large files, such as the
/// counter snapshot, are never held in memory whole).
pub fn write_with(
    path: &Path,
    private: bool,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), StoreError> {
    let err = |source| StoreError::Write {
        path: path.to_path_buf(),
        source,
    };
    let tmp = tmp_path(path);
    {
        let mut opts = fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        if private {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let f = opts.open(&tmp).map_err(err)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
        fill(&mut w).map_err(err)?;
        let f = w.into_inner().map_err(|e| err(e.into_error()))?;
        f.sync_all().map_err(err)?;
    }
    fs::rename(&tmp, path).map_err(err)?;
    if let Some(dir) = path.parent() {
        // Make the rename itself durable; a failure here leaves a valid file either way.
        if let Ok(d) = fs::File::open(dir) {
            let _synced = d.sync_all();
        }
    }
    Ok(())
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}", std::process::id()));
    path.with_file_name(name)
}

/// What reading a state file found.
pub enum Loaded<T> {
    Missing,
    Ok(T),
    /// Did not parse; moved aside.
    Corrupt(CorruptFile),
}

/// Reads `path` as JSON; a file that does not parse is renamed aside and reported.
pub fn read_json<T: DeserializeOwned>(path: &Path, now_ms: u64) -> Result<Loaded<T>, StoreError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::Missing),
        Err(source) => {
            return Err(StoreError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    match serde_json::from_slice(&bytes) {
        Ok(v) => Ok(Loaded::Ok(v)),
        Err(e) => Ok(Loaded::Corrupt(set_aside(path, e.to_string(), now_ms)?)),
    }
}

/// Renames a bad file to `<name>.corrupt-<now_ms>` and logs it.
pub fn set_aside(path: &Path, error: String, now_ms: u64) -> Result<CorruptFile, StoreError> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".corrupt-{now_ms}"));
    let moved_to = path.with_file_name(name);
    fs::rename(path, &moved_to).map_err(|source| StoreError::Write {
        path: path.to_path_buf(),
        source,
    })?;
    tracing::error!(
        file = %path.display(),
        moved_to = %moved_to.display(),
        %error,
        "corrupt state file set aside; starting without its contents"
    );
    Ok(CorruptFile {
        file: path.to_path_buf(),
        moved_to,
        error,
    })
}
