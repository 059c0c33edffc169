//! A process run as an installed daemon would run, without touching the host's own: inside a
//! test's network namespace (`ip netns exec`, which also gives it a private mount namespace),
//! on a bpffs of its own at `/sys/fs/bpf`, with chosen directories (the state directory, the
//! source tree) covered by empty tmpfs mounts. Fixed paths and ports from a shipped config can
//! then be used as they are; everything the process pinned or wrote goes away with it.
//!
//! Later commands join the same namespaces with [`join`] (nsenter on the process's pid).

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

use crate::netns::Netns;

/// `program` in `ns`, with a fresh bpffs and each of `cover` hidden under an empty tmpfs
/// (created first when missing). The process that runs is `program` itself (`exec`), so the
/// child's pid is the program's.
pub fn command(ns: &Netns, cover: &[&Path], program: impl AsRef<OsStr>) -> Command {
    let mut script = String::from("set -e; mount -t bpf bpf /sys/fs/bpf; ");
    for dir in cover {
        let dir = dir.display().to_string();
        assert!(!dir.contains('\''), "a path with a quote: {dir}");
        script.push_str(&format!(
            "mkdir -p '{dir}'; mount -t tmpfs -o mode=0755 tmpfs '{dir}'; "
        ));
    }
    script.push_str("exec \"$@\"");
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns.name(), "sh", "-c", &script, "sh"])
        .arg(program);
    cmd
}

/// `program` in the network and mount namespaces of the running process `pid` (one started by
/// [`command`], or one of its descendants), in the directory `cwd` (entering a mount namespace
/// starts at its root otherwise).
pub fn join(pid: u32, cwd: &Path, program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new("nsenter");
    cmd.arg("-t")
        .arg(pid.to_string())
        .args(["-m", "-n"])
        .arg(format!("--wd={}", cwd.display()))
        .arg("--")
        .arg(program);
    cmd
}
