//! State files: written atomically (temporary file, fsync, rename) and read defensively — a
//! file that does not parse is reported and renamed aside (`<name>.corrupt-<ms>`) so the daemon
//! starts with that part empty instead of refusing to start or silently overwriting evidence.
//!
//! The daemon often runs as root, so the state directory is no place to follow a name
//! somebody else chose: the directory is made 0700 and every file 0600 whatever the umask
//! ([`private_dir`]), and a temporary file is created new (`O_EXCL | O_NOFOLLOW`), so a
//! symlink planted under its name makes the write fail instead of overwriting the link's
//! target. Temporary files a killed process left behind (`<name>.tmp-<pid>`) are removed when
//! the directory is opened ([`remove_stale_temps`]).

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
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
    write_bytes(path, &bytes)
}

/// Writes bytes atomically, readable by the daemon's user only.
pub fn write_bytes(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    write_with(path, |w| w.write_all(bytes))
}

/// Creates `path` new and empty, mode 0600 whatever the umask; an existing file or symlink
/// under that name is an error (`EEXIST`, `ELOOP`), never followed.
pub fn create_private(path: &Path) -> std::io::Result<fs::File> {
    let f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    // The umask may have taken bits off 0600; the file is ours to set.
    f.set_permissions(fs::Permissions::from_mode(0o600))?;
    Ok(f)
}

/// Writes what `fill` produces atomically, streamed through a buffer (large files, such as the
/// counter snapshot, are never held in memory whole). The file is 0600.
pub fn write_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), StoreError> {
    let err = |source| StoreError::Write {
        path: path.to_path_buf(),
        source,
    };
    let tmp = tmp_path(path);
    {
        // Our own leftover (an earlier write of this process that failed) goes first; unlink
        // removes a symlink itself, not what it points at. Anything planted after that makes
        // `create_private` fail rather than follow it.
        match fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(e)),
        }
        let f = create_private(&tmp).map_err(err)?;
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

/// What a temporary file is called: `<name>.tmp-<pid>`.
const TMP_MARK: &str = ".tmp-";

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!("{TMP_MARK}{}", std::process::id()));
    path.with_file_name(name)
}

/// Creates `dir` if needed and makes it 0700 whatever the umask; a directory that was open
/// to others is closed, and the log says so.
pub fn private_dir(dir: &Path) -> Result<(), StoreError> {
    let failed = |source| StoreError::StateDir {
        path: dir.to_path_buf(),
        source,
    };
    fs::create_dir_all(dir).map_err(failed)?;
    let mode = fs::metadata(dir).map_err(failed)?.permissions().mode() & 0o7777;
    if mode != 0o700 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(failed)?;
        if mode & 0o077 != 0 {
            tracing::warn!(
                dir = %dir.display(),
                was = format!("{mode:04o}"),
                "the state directory was open to other users; it is 0700 now"
            );
        }
    }
    Ok(())
}

/// Removes the `<name>.tmp-<pid>` files in `dir` (what a process killed mid-write leaves),
/// except this process's own. Returns how many went.
pub fn remove_stale_temps(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let own = format!("{TMP_MARK}{}", std::process::id());
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let stale = name.rfind(TMP_MARK).is_some_and(|at| {
            let pid = &name[at + TMP_MARK.len()..];
            at > 0 && !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())
        }) && !name.ends_with(&own);
        // Only plain files (a symlink is removed as the link, never followed).
        let is_file = entry
            .file_type()
            .is_ok_and(|t| t.is_file() || t.is_symlink());
        if stale && is_file && fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    if removed > 0 {
        tracing::info!(dir = %dir.display(), removed, "removed temporary files left by an interrupted write");
    }
    removed
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 21, P8: a symlink planted under the temporary file's name made root overwrite
    /// its target. The write now removes the link (never following it) and creates its
    /// temporary file new.
    #[test]
    fn a_symlink_planted_as_the_temporary_file_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        let path = dir.path().join("enforcement.json");
        std::os::unix::fs::symlink(&victim, tmp_path(&path)).unwrap();
        write_bytes(&path, b"{}").unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert_eq!(fs::read(&path).unwrap(), b"{}");
        assert!(!fs::symlink_metadata(&path).unwrap().is_symlink());
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn create_private_refuses_an_existing_name_or_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(create_private(&link).is_err());
        assert!(create_private(&victim).is_err());
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
    }

    #[test]
    fn stale_temporary_files_go_and_others_stay() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "counters.snapshot.tmp-123",
            "keys.json.tmp-9",
            "keys.json",
            "notes.tmp-draft",
            ".tmp-5",
        ] {
            fs::write(dir.path().join(name), b"x").unwrap();
        }
        let own = tmp_path(&dir.path().join("lists.json"));
        fs::write(&own, b"x").unwrap();
        assert_eq!(remove_stale_temps(dir.path()), 2);
        let mut left: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let own_name = own.file_name().unwrap().to_string_lossy().into_owned();
        let mut want = vec![
            ".tmp-5".to_string(),
            "keys.json".into(),
            "notes.tmp-draft".into(),
            own_name,
        ];
        want.sort();
        assert_eq!(left, want);
    }

    #[test]
    fn the_state_directory_is_made_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        fs::create_dir(&state).unwrap();
        fs::set_permissions(&state, fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&state).unwrap();
        let mode = fs::metadata(&state).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        let fresh = dir.path().join("a").join("b");
        private_dir(&fresh).unwrap();
        assert_eq!(
            fs::metadata(&fresh).unwrap().permissions().mode() & 0o7777,
            0o700
        );
    }
}
