//! `cargo xtask package`: the `.deb` an operator installs. Staged by hand and built with
//! `dpkg-deb` (part of dpkg, so nothing to install): the two binaries, the systemd unit from
//! `packaging/`, the example config as the conffile `/etc/limiter/limiter.toml`, the logrotate
//! file (also a conffile), `/var/lib/limiter`, and what an operator reads:
//!
//! - man pages for both binaries and each of their subcommands, gzipped in
//!   `/usr/share/man/man1`, written by the binaries themselves (`man-pages <dir>`, hidden) from
//!   their clap definitions, so the pages cannot drift from `--help`;
//! - bash, zsh and fish completions from the same definitions (`completions <shell>`), where
//!   each shell looks for a package's;
//! - `/usr/share/doc/limiter/`: the README, `docs/`, and `examples/` (the Grafana dashboard,
//!   the Prometheus alert rules, the nginx, Caddy, HAProxy, Envoy and Traefik front ends), laid
//!   out as in the repository so their relative links hold.

use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::{root, sh};

const PACKAGE: &str = "limiter";
const BINARIES: [&str; 2] = ["limiter-daemon", "limiterctl"];
const CONFFILE: &str = "etc/limiter/limiter.toml";
const LOGROTATE: &str = "etc/logrotate.d/limiter";
const UNIT: &str = "lib/systemd/system/limiter.service";
const MAINTAINER_SCRIPTS: [&str; 3] = ["postinst", "prerm", "postrm"];
/// Where each shell looks for a package's completions, and the file name for a binary.
const COMPLETIONS: [(&str, &str, &str, &str); 3] = [
    ("bash", "usr/share/bash-completion/completions", "", ""),
    ("zsh", "usr/share/zsh/vendor-completions", "_", ""),
    ("fish", "usr/share/fish/vendor_completions.d", "", ".fish"),
];
/// Copied whole into `/usr/share/doc/limiter/`.
const DOC_DIRS: [&str; 2] = ["docs", "examples"];

/// Builds the package from the binaries in `bin_dir` into `out_dir`, compressed with
/// `compression` (a `dpkg-deb -Z` value); returns the `.deb`'s path.
pub fn build(bin_dir: &Path, out_dir: &Path, compression: &str) -> Result<PathBuf> {
    let version = env!("CARGO_PKG_VERSION");
    let arch = String::from_utf8(
        Command::new("dpkg")
            .arg("--print-architecture")
            .output()
            .context("dpkg --print-architecture")?
            .stdout,
    )?
    .trim()
    .to_string();
    fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let stage = out_dir.join(format!("{PACKAGE}_{version}_{arch}"));
    if stage.exists() {
        fs::remove_dir_all(&stage).with_context(|| format!("clearing {}", stage.display()))?;
    }

    for bin in BINARIES {
        let from = bin_dir.join(bin);
        if !from.is_file() {
            bail!("{} is missing: build it first", from.display());
        }
        let to = stage.join("usr/bin").join(bin);
        mkdir_for(&to)?;
        // Debug info stays in the build tree; the installed binary keeps its symbols.
        sh(Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(&to)
            .arg(&from))?;
        mode(&to, 0o755)?;
    }
    copy(
        &root().join("packaging/limiter.service"),
        &stage.join(UNIT),
        0o644,
    )?;
    let config = fs::read_to_string(root().join("examples/limiter.toml"))
        .context("reading examples/limiter.toml")?;
    // The example's paths are already the installed ones; only the file's own name changes.
    let config = config.replace("examples/limiter.toml", "/etc/limiter/limiter.toml");
    write(&stage.join(CONFFILE), &config, 0o644)?;
    fs::create_dir_all(stage.join("var/lib/limiter"))?;
    copy(
        &root().join("packaging/logrotate"),
        &stage.join(LOGROTATE),
        0o644,
    )?;
    for bin in BINARIES {
        let exe = bin_dir.join(bin);
        man_pages(&exe, &stage.join("usr/share/man/man1"))?;
        for (shell, dir, prefix, suffix) in COMPLETIONS {
            let out = Command::new(&exe)
                .args(["completions", shell])
                .output()
                .with_context(|| format!("{bin} completions {shell}"))?;
            if !out.status.success() || out.stdout.is_empty() {
                bail!(
                    "{bin} completions {shell}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let to = stage.join(dir).join(format!("{prefix}{bin}{suffix}"));
            write(&to, std::str::from_utf8(&out.stdout)?, 0o644)?;
        }
    }
    let doc = stage.join("usr/share/doc").join(PACKAGE);
    copy(&root().join("README.md"), &doc.join("README.md"), 0o644)?;
    for dir in DOC_DIRS {
        copy_tree(&root().join(dir), &doc.join(dir))?;
    }
    write(
        &doc.join("copyright"),
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: limiter\n\nFiles: *\nLicense: MIT OR Apache-2.0\n",
        0o644,
    )?;

    let debian = stage.join("DEBIAN");
    let installed_kb = du_kb(&stage)?;
    write(
        &debian.join("control"),
        &control(version, &arch, installed_kb),
        0o644,
    )?;
    write(
        &debian.join("conffiles"),
        &format!("/{CONFFILE}\n/{LOGROTATE}\n"),
        0o644,
    )?;
    for script in MAINTAINER_SCRIPTS {
        copy(
            &root().join("packaging").join(script),
            &debian.join(script),
            0o755,
        )?;
    }
    write(&debian.join("md5sums"), &md5sums(&stage)?, 0o644)?;

    let deb = out_dir.join(format!("{PACKAGE}_{version}_{arch}.deb"));
    // dpkg-deb's progress goes to stderr: stdout carries only the package's path.
    sh(Command::new("dpkg-deb")
        .stdout(std::io::stderr())
        .args(["--root-owner-group", &format!("-Z{compression}"), "--build"])
        .arg(&stage)
        .arg(&deb))?;
    fs::remove_dir_all(&stage)?;
    Ok(deb)
}

fn control(version: &str, arch: &str, installed_kb: u64) -> String {
    format!(
        "Package: {PACKAGE}\nVersion: {version}\nArchitecture: {arch}\n\
         Maintainer: limiter maintainers <limiter@localhost>\nSection: net\nPriority: optional\n\
         Depends: libc6 (>= 2.34), libgcc-s1\nInstalled-Size: {installed_kb}\n\
         Description: host rate limiter: XDP/TC dataplane and HTTP metering daemon\n \
         An XDP/TC program drops new connections beyond an IP's ceiling and every packet from\n \
         a locked-out IP; the daemon meters HTTP callers by tier, answers 429s that name the\n \
         next rung, and pushes escalating lockouts into the kernel. limiter-daemon carries its\n \
         eBPF object; limiterctl drives the admin API.\n"
    )
}

/// `md5sum` lines for every file outside `DEBIAN/`, paths relative to the root.
fn md5sums(stage: &Path) -> Result<String> {
    let mut files = Vec::new();
    walk(stage, &mut files)?;
    files.sort();
    let mut out = String::new();
    for f in files {
        let rel = f.strip_prefix(stage)?;
        if rel.starts_with("DEBIAN") {
            continue;
        }
        let sum = Command::new("md5sum").arg(&f).output().context("md5sum")?;
        let sum = String::from_utf8(sum.stdout)?;
        let hash = sum.split_whitespace().next().context("md5sum output")?;
        writeln!(out, "{hash}  {}", rel.display())?;
    }
    Ok(out)
}

fn du_kb(stage: &Path) -> Result<u64> {
    let mut files = Vec::new();
    walk(stage, &mut files)?;
    let bytes: u64 = files
        .iter()
        .map(|f| fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    Ok(bytes.div_ceil(1024))
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            walk(&path, files)?;
        } else {
            files.push(path);
        }
    }
    Ok(())
}

/// `exe man-pages` into a scratch directory, then each page gzipped (`-9n`: no name or time
/// stamp, as Debian wants) into `man1`.
fn man_pages(exe: &Path, man1: &Path) -> Result<()> {
    let scratch = man1.with_file_name("man1.scratch");
    if scratch.exists() {
        fs::remove_dir_all(&scratch)?;
    }
    sh(Command::new(exe).arg("man-pages").arg(&scratch))?;
    fs::create_dir_all(man1)?;
    let mut pages = Vec::new();
    walk(&scratch, &mut pages)?;
    if pages.is_empty() {
        bail!("{} man-pages wrote nothing", exe.display());
    }
    for page in pages {
        let name = page.file_name().context("a page's name")?.to_string_lossy();
        let gz = man1.join(format!("{name}.gz"));
        let out = Command::new("gzip")
            .args(["-9n", "-c"])
            .arg(&page)
            .output()
            .context("gzip")?;
        if !out.status.success() {
            bail!(
                "gzip {}: {}",
                page.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        fs::write(&gz, out.stdout).with_context(|| format!("writing {}", gz.display()))?;
        mode(&gz, 0o644)?;
    }
    fs::remove_dir_all(&scratch)?;
    Ok(())
}

/// Every file under `from` to the same place under `to`, readable by all.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let mut files = Vec::new();
    walk(from, &mut files)?;
    for f in files {
        copy(&f, &to.join(f.strip_prefix(from)?), 0o644)?;
    }
    Ok(())
}

fn mkdir_for(path: &Path) -> Result<()> {
    let dir = path.parent().context("a file in a directory")?;
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

fn mode(path: &Path, mode: u32) -> Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", path.display()))
}

fn copy(from: &Path, to: &Path, m: u32) -> Result<()> {
    mkdir_for(to)?;
    fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    mode(to, m)
}

fn write(to: &Path, text: &str, m: u32) -> Result<()> {
    mkdir_for(to)?;
    fs::write(to, text).with_context(|| format!("writing {}", to.display()))?;
    mode(to, m)
}
