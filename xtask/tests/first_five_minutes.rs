//! The README's "First five minutes" block, run verbatim against a daemon started the way the
//! README says (`cargo xtask run --iface lo`), so the README cannot rot.
//!
//! What differs from a reader's machine, and why: everything runs in a network namespace the
//! test creates, with its own bpffs and an empty `/var/lib/limiter` (the example config's fixed
//! ports, pin path and state directory then collide with nothing on the host); `xtask run` gets
//! `--bin-dir` (a test cannot start a cargo build inside `cargo test`) pointing at the debug
//! binaries, which the block finds as `$PWD/target/release` from a scratch directory whose
//! `target/release` and `examples` link to them and to the checkout's examples.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use limiter_tests::netns::{require_dataplane, Netns};
use limiter_tests::{daemon_binary, isolated, poll, workspace_root};

const BEGIN: &str = "<!-- first-five-minutes -->";
const END: &str = "<!-- /first-five-minutes -->";

/// The shell lines of the README's marked block (inside its ```sh fence).
fn readme_block() -> String {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let start = readme
        .find(BEGIN)
        .expect("the README marks its first-five-minutes block");
    let rest = &readme[start + BEGIN.len()..];
    let block = &rest[..rest.find(END).expect("the block's end marker")];
    let body = block
        .trim()
        .strip_prefix("```sh\n")
        .and_then(|b| b.strip_suffix("```"))
        .expect("one ```sh fence between the markers");
    body.to_string()
}

/// Stops `xtask run` and its daemon as Ctrl-C would: a signal to the whole process group.
struct Run {
    child: Child,
}

impl Drop for Run {
    fn drop(&mut self) {
        let group = self.child.id() as libc::pid_t;
        let daemon: Vec<i32> =
            std::fs::read_to_string(format!("/proc/{group}/task/{group}/children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
        // SAFETY: signalling the process group this test started (the child leads it).
        unsafe { libc::kill(-group, libc::SIGINT) };
        // Not `poll`: a panic here, while a failed test unwinds, would abort the run.
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let gone = daemon
                .iter()
                .all(|p| !Path::new(&format!("/proc/{p}")).exists());
            if gone && self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::park_timeout(Duration::from_millis(20));
        }
        eprintln!("xtask run (pid {group}) or its daemon {daemon:?} did not stop in 20 s");
        let _killed = self.child.kill();
    }
}

#[test]
fn the_readme_first_five_minutes_run_verbatim() {
    if !require_dataplane() {
        return;
    }
    let ns = Netns::new("ffm");
    let dir = tempfile::tempdir().unwrap();
    let debug = daemon_binary().parent().unwrap().to_path_buf();
    std::fs::create_dir(dir.path().join("target")).unwrap();
    std::os::unix::fs::symlink(&debug, dir.path().join("target/release")).unwrap();
    std::os::unix::fs::symlink(
        workspace_root().join("examples"),
        dir.path().join("examples"),
    )
    .unwrap();
    let log = dir.path().join("xtask-run.log");

    // The README: `cargo xtask run --iface lo`.
    let mut cmd = isolated::command(
        &ns,
        &[Path::new("/var/lib/limiter")],
        env!("CARGO_BIN_EXE_xtask"),
    );
    cmd.args(["run", "--iface", "lo", "--bin-dir", "target/release"])
        .current_dir(dir.path())
        .env_remove("LIMITER_EBPF_OBJECT")
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::from(
            std::fs::OpenOptions::new().append(true).open(&log).unwrap(),
        ));
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut run = Run {
        child: cmd.spawn().unwrap(),
    };
    let started = poll(Duration::from_secs(30), "the daemon's listeners", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Ok(Some(status)) = run.child.try_wait() {
            panic!("xtask run exited with {status}:\n{text}");
        }
        (text.contains("kernel dataplane ready") && text.contains("reverse proxy listening"))
            .then_some(text)
    });
    assert!(
        started.contains("a demo upstream answering 200 runs there now"),
        "{started}"
    );

    let out = isolated::join(run.child.id(), dir.path(), "bash")
        .args(["-e", "-o", "pipefail", "-c", &readme_block()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let shown = format!(
        "stdout:\n{stdout}\nstderr:\n{stderr}\ndaemon:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(
        out.status.success(),
        "the block failed ({}):\n{shown}",
        out.status
    );

    // 1. A proxied 200 with its rate-limit headers.
    let ok = stdout.find("HTTP/1.1 200 OK").expect("a 200 first");
    for header in [
        "x-ratelimit-remaining: 119",
        "ratelimit-policy:",
        "ratelimit:",
    ] {
        assert!(stdout[ok..].contains(header), "{header}:\n{shown}");
    }
    // 2. A 429 with its upgrade sentence.
    let refused = stdout.find("HTTP/1.1 429").expect("then a 429");
    assert!(
        stdout[refused..].contains(
            "\"upgrade\":\"Sign in at /login for the session allowance (10x the anonymous budget).\""
        ),
        "{shown}"
    );
    // 3. The lockout in the store and in the kernel.
    let lines: Vec<&str> = stdout.lines().collect();
    let locked = lines
        .iter()
        .position(|l| l.starts_with("203.0.113.9 ") && l.contains("burst"))
        .unwrap_or_else(|| panic!("the lockout listed:\n{shown}"));
    let kernel = &lines[locked..];
    assert!(
        kernel
            .iter()
            .any(|l| l.contains("lo (") && l.contains("limiter_xdp")),
        "{shown}"
    );
    assert!(
        kernel.iter().any(
            |l| l.split_whitespace().collect::<Vec<_>>() == ["LIM_LOCKOUT", "1", "/", "262144"]
        ),
        "{shown}"
    );
    // 4. The unlock, and nothing listed after it.
    let lifted = lines
        .iter()
        .position(|l| *l == "lifted 203.0.113.9")
        .unwrap_or_else(|| panic!("the unlock:\n{shown}"));
    assert!(
        !lines[lifted..].iter().any(|l| l.starts_with("203.0.113.9")),
        "{shown}"
    );
    drop(run);
}
