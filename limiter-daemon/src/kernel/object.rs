//! Finding the built eBPF object without the user passing a path.
//!
//! Order: `LIMITER_EBPF_OBJECT` (an explicit choice, so a wrong value is an error, not a fallback),
//! then `limiter-ebpf` next to the running executable (how an installed daemon ships it), then the
//! build output of `cargo xtask build-ebpf` in the workspace this binary was compiled from.

use std::path::{Path, PathBuf};

use super::KernelError;

/// The environment variable naming the object explicitly.
pub const OBJECT_ENV: &str = "LIMITER_EBPF_OBJECT";
/// File name of the object, both next to the executable and in the build output.
pub const OBJECT_NAME: &str = "limiter-ebpf";

/// Where `cargo xtask build-ebpf` writes the object, for the workspace this crate was built in.
pub fn build_output_path() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .unwrap_or(manifest)
        .join("limiter-ebpf/target/bpfel-unknown-none/release")
        .join(OBJECT_NAME)
}

/// Locates the object; the error lists every place tried and the command that builds it.
pub fn find_object() -> Result<PathBuf, KernelError> {
    find_object_with(
        std::env::var_os(OBJECT_ENV).map(PathBuf::from),
        std::env::current_exe().ok(),
    )
}

fn find_object_with(env: Option<PathBuf>, exe: Option<PathBuf>) -> Result<PathBuf, KernelError> {
    if let Some(path) = env.filter(|p| !p.as_os_str().is_empty()) {
        return if path.is_file() {
            Ok(path)
        } else {
            Err(KernelError::ObjectEnvMissing { path })
        };
    }
    let mut tried = Vec::new();
    if let Some(dir) = exe.as_deref().and_then(Path::parent) {
        tried.push(dir.join(OBJECT_NAME));
    }
    tried.push(build_output_path());
    match tried.iter().find(|p| p.is_file()) {
        Some(found) => Ok(found.clone()),
        None => Err(KernelError::ObjectMissing { tried }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_wins_and_a_wrong_env_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let obj = dir.path().join("obj");
        std::fs::write(&obj, b"x").unwrap();
        assert_eq!(find_object_with(Some(obj.clone()), None).unwrap(), obj);
        let err = find_object_with(Some(dir.path().join("nope")), None).unwrap_err();
        assert!(err.to_string().contains("cargo xtask build-ebpf"), "{err}");
    }

    #[test]
    fn next_to_the_executable_is_found() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(OBJECT_NAME), b"x").unwrap();
        let exe = dir.path().join("limiter-daemon");
        assert_eq!(
            find_object_with(None, Some(exe)).unwrap(),
            dir.path().join(OBJECT_NAME)
        );
    }

    #[test]
    fn missing_object_names_the_build_command() {
        if build_output_path().is_file() {
            // The workspace has a built object, which is then (correctly) found.
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let err = find_object_with(None, Some(dir.path().join("exe"))).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("run `cargo xtask build-ebpf`"), "{msg}");
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
    }
}
