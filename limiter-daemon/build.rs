//! Builds the eBPF object and copies it into `OUT_DIR`, where `kernel/object.rs` embeds it with
//! `aya::include_bytes_aligned!`: the daemon binary is then the one file to deploy.
//!
//! The object is built the way `cargo xtask build-ebpf` builds it (the nightly, `build-std=core`,
//! bpf-linker) into the eBPF crate's own target directory, so both share one incremental build
//! and a second target directory never appears. The script reruns only when a source of the eBPF
//! program (or of `limiter-common`, which it shares) changes; an unchanged tree costs nothing.
//!
//! `LIMITER_EBPF_BUILD=skip` embeds nothing (for a machine without the nightly or bpf-linker);
//! such a binary needs `LIMITER_EBPF_OBJECT` at run time and says so.
//!
//! It also stamps what `<ns>_build_info` reports: `LIMITER_BUILD_COMMIT` (the checkout's commit
//! from git, else the `LIMITER_GIT_COMMIT` given to the build, else `unknown`) and
//! `LIMITER_BUILD_FEATURES` (the cargo features on, and `ebpf` when the object is embedded).

use std::path::{Path, PathBuf};
use std::process::Command;

/// File name of the object in the eBPF build output and in `OUT_DIR`.
const OBJECT: &str = "limiter-ebpf";

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest.parent().expect("the daemon sits in the workspace");
    let ebpf = root.join("limiter-ebpf");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo")).join(OBJECT);

    println!("cargo:rerun-if-env-changed=LIMITER_EBPF_BUILD");
    let skip = std::env::var("LIMITER_EBPF_BUILD").is_ok_and(|v| v == "skip");
    stamp_build_info(root, !skip);
    // Not the eBPF crate's directory as a whole: its target/ changes with every build.
    for input in [
        ebpf.join("src"),
        ebpf.join("Cargo.toml"),
        ebpf.join("Cargo.lock"),
        ebpf.join(".cargo"),
        root.join("limiter-common/src"),
        root.join("limiter-common/Cargo.toml"),
    ] {
        println!("cargo:rerun-if-changed={}", input.display());
    }

    if skip {
        println!(
            "cargo:warning=LIMITER_EBPF_BUILD=skip: no eBPF object embedded; \
             the daemon will need LIMITER_EBPF_OBJECT"
        );
        std::fs::write(&out, b"").expect("writing the empty object");
        return;
    }
    build(&ebpf);
    let built = ebpf.join("target/bpfel-unknown-none/release").join(OBJECT);
    std::fs::copy(&built, &out)
        .unwrap_or_else(|e| panic!("copying {} to {}: {e}", built.display(), out.display()));
}

/// `cargo +nightly build` in the eBPF crate, free of the environment cargo gives a build script
/// (its toolchain, rustc, wrappers such as clippy-driver, flags such as cargo-fuzz's sanitizer,
/// target directory): those belong to the daemon's build, not to the BPF target's.
fn build(ebpf: &Path) {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(ebpf);
    for var in [
        "RUSTUP_TOOLCHAIN",
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTFLAGS",
        "RUSTDOCFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_BUILD_TARGET_DIR",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_MAKEFLAGS",
        "CARGO_PROFILE_RELEASE_DEBUG",
    ] {
        cmd.env_remove(var);
    }
    cmd.args([
        "+nightly",
        "build",
        "--release",
        "--target",
        "bpfel-unknown-none",
        "-Z",
        "build-std=core",
    ]);
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("starting `cargo +nightly build` for the eBPF object: {e}"));
    assert!(
        status.success(),
        "building the eBPF object in {} failed ({status}); run `cargo xtask setup` (nightly \
         rust-src, bpf-linker) or set LIMITER_EBPF_BUILD=skip and LIMITER_EBPF_OBJECT",
        ebpf.display()
    );
}

/// `LIMITER_BUILD_COMMIT` and `LIMITER_BUILD_FEATURES` for `metrics::build_info`.
fn stamp_build_info(root: &Path, ebpf: bool) {
    println!("cargo:rerun-if-env-changed=LIMITER_GIT_COMMIT");
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .current_dir(root)
            .args(args)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !text.is_empty()).then_some(text)
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"])
        .or_else(|| std::env::var("LIMITER_GIT_COMMIT").ok())
        .unwrap_or_else(|| "unknown".to_string());
    // Rerun when HEAD moves: its file (a branch switch) and the branch's ref (a commit). Only
    // paths that exist: cargo reruns a script on every build while one it names is missing.
    let mut watch = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(git(&["rev-parse", "--git-path", &branch]));
    }
    watch.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    for path in watch.into_iter().flatten() {
        let path = root.join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| {
            Some(
                k.strip_prefix("CARGO_FEATURE_")?
                    .to_lowercase()
                    .replace('_', "-"),
            )
        })
        .collect();
    if ebpf {
        features.push("ebpf".to_string());
    }
    features.sort();
    println!("cargo:rustc-env=LIMITER_BUILD_COMMIT={commit}");
    println!(
        "cargo:rustc-env=LIMITER_BUILD_FEATURES={}",
        features.join(",")
    );
}
