//! The last good copy of each fetched proof source, on disk in `<state_dir>/proofs/`: what the
//! daemon uses at start when the network (or the publisher) is down. One file per source,
//! named by a digest of its URL, written atomically and private (temporary file created new,
//! 0600, renamed: [`crate::store::state_file`]): a JSON line of metadata (the URL, the
//! validators to send next time, when it was fetched), then the body exactly as it was served.
//! Only a body that parsed is written, so a broken download never replaces a good copy.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::https::Validators;
use crate::store::state_file;

/// The directory under the state directory.
pub const DIR: &str = "proofs";

/// The metadata line.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    pub url: String,
    pub validators: Validators,
    /// Wall-clock ms of the fetch that brought this body.
    pub fetched_ms: u64,
}

/// Where the copy of `url` lives under `state_dir`.
pub fn path(state_dir: &Path, url: &str) -> PathBuf {
    let digest = hex::encode(&Sha256::digest(url.as_bytes())[..12]);
    state_dir.join(DIR).join(format!("{digest}.last-good"))
}

/// Writes the copy of `meta.url`.
pub fn write(state_dir: &Path, meta: &Meta, body: &[u8]) -> Result<(), String> {
    let dir = state_dir.join(DIR);
    state_file::private_dir(&dir).map_err(|e| e.to_string())?;
    let line = serde_json::to_vec(meta).map_err(|e| e.to_string())?;
    state_file::write_with(&path(state_dir, &meta.url), |w| {
        w.write_all(&line)?;
        w.write_all(b"\n")?;
        w.write_all(body)
    })
    .map_err(|e| e.to_string())
}

/// The copy of `url`, if one is on disk and its metadata names that URL.
pub fn read(state_dir: &Path, url: &str) -> Result<Option<(Meta, Vec<u8>)>, String> {
    let p = path(state_dir, url);
    let mut bytes = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", p.display())),
    };
    let Some(nl) = bytes.iter().position(|&b| b == b'\n') else {
        return Err(format!("{}: no metadata line", p.display()));
    };
    let meta: Meta = serde_json::from_slice(&bytes[..nl])
        .map_err(|e| format!("{}: metadata: {e}", p.display()))?;
    if meta.url != url {
        return Err(format!("{}: holds {}, not {url}", p.display(), meta.url));
    }
    let body = bytes.split_off(nl + 1);
    Ok(Some((meta, body)))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn a_copy_round_trips_privately_and_names_its_url() {
        let dir = tempfile::tempdir().unwrap();
        let url = "https://www.bing.com/toolbox/bingbot.json";
        assert_eq!(read(dir.path(), url).unwrap(), None);
        let meta = Meta {
            url: url.into(),
            validators: Validators {
                etag: Some("\"v1\"".into()),
                last_modified: None,
            },
            fetched_ms: 7,
        };
        let body = b"{\"prefixes\":[]}\n\x1f\x8b binary too";
        write(dir.path(), &meta, body).unwrap();
        let (m, b) = read(dir.path(), url).unwrap().unwrap();
        assert_eq!((m, b.as_slice()), (meta, &body[..]));
        let mode = std::fs::metadata(path(dir.path(), url))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::copy(
            path(dir.path(), url),
            path(dir.path(), "https://openai.com/gptbot.json"),
        )
        .unwrap();
        let err = read(dir.path(), "https://openai.com/gptbot.json").unwrap_err();
        assert!(err.contains("not https://openai.com/gptbot.json"), "{err}");
    }
}
