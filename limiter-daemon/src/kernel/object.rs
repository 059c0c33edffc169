//! Which eBPF object the daemon loads: the one `build.rs` embedded in this binary, unless
//! `LIMITER_EBPF_OBJECT` names a file (an explicit choice, so a wrong value is an error, not a
//! fallback). A copied or installed binary therefore needs nothing beside it.

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;

use super::KernelError;

/// The environment variable naming the object explicitly.
pub const OBJECT_ENV: &str = "LIMITER_EBPF_OBJECT";

/// The object `build.rs` built and copied into `OUT_DIR`; empty when it was built with
/// `LIMITER_EBPF_BUILD=skip`.
static EMBEDDED: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/limiter-ebpf"));

/// Where the loaded object came from, for the log and error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectSource {
    /// Compiled into this binary.
    Embedded,
    /// Read from the file `LIMITER_EBPF_OBJECT` names.
    File(PathBuf),
}

impl fmt::Display for ObjectSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjectSource::Embedded => write!(f, "embedded ({} bytes)", EMBEDDED.len()),
            ObjectSource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// An object ready for `EbpfLoader::load`: its bytes and where they came from.
pub struct Object {
    pub source: ObjectSource,
    pub bytes: Cow<'static, [u8]>,
}

/// Picks the object: `LIMITER_EBPF_OBJECT` when set, else the embedded one.
pub fn find_object() -> Result<Object, KernelError> {
    find_object_with(std::env::var_os(OBJECT_ENV).map(PathBuf::from), EMBEDDED)
}

fn find_object_with(env: Option<PathBuf>, embedded: &'static [u8]) -> Result<Object, KernelError> {
    if let Some(path) = env.filter(|p| !p.as_os_str().is_empty()) {
        if !path.is_file() {
            return Err(KernelError::ObjectEnvMissing { path });
        }
        let bytes = std::fs::read(&path).map_err(|e| KernelError::io(&path, e))?;
        return Ok(Object {
            source: ObjectSource::File(path),
            bytes: Cow::Owned(bytes),
        });
    }
    if embedded.is_empty() {
        return Err(KernelError::ObjectNotEmbedded);
    }
    Ok(Object {
        source: ObjectSource::Embedded,
        bytes: Cow::Borrowed(embedded),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_object_is_an_ebpf_elf() {
        let obj = find_object_with(None, EMBEDDED).unwrap();
        assert_eq!(obj.source, ObjectSource::Embedded);
        // ELF magic, 64-bit, little endian, machine EM_BPF (247).
        assert_eq!(&obj.bytes[..4], b"\x7fELF");
        assert_eq!(obj.bytes[4], 2);
        assert_eq!(obj.bytes[5], 1);
        assert_eq!(u16::from_le_bytes([obj.bytes[18], obj.bytes[19]]), 247);
    }

    #[test]
    fn env_wins_and_a_wrong_env_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let obj = dir.path().join("obj");
        std::fs::write(&obj, b"x").unwrap();
        let found = find_object_with(Some(obj.clone()), EMBEDDED).unwrap();
        assert_eq!(found.source, ObjectSource::File(obj));
        assert_eq!(&*found.bytes, b"x");
        let err = find_object_with(Some(dir.path().join("nope")), EMBEDDED)
            .err()
            .unwrap();
        assert!(err.to_string().contains("cargo xtask build-ebpf"), "{err}");
    }

    #[test]
    fn a_binary_built_without_the_object_says_what_to_set() {
        let err = find_object_with(None, &[]).err().unwrap();
        let msg = err.to_string();
        assert!(msg.contains("LIMITER_EBPF_OBJECT"), "{msg}");
        assert!(msg.contains("LIMITER_EBPF_BUILD=skip"), "{msg}");
    }
}
