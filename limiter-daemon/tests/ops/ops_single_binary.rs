//! One file to deploy: the daemon binary, copied alone into an empty directory on a host where
//! the source tree it was built from is out of sight, loads the eBPF object it carries and
//! attaches it to a veth inside a network namespace the test creates.

use std::process::Stdio;
use std::time::Duration;

use limiter_tests::netns::{require_dataplane, VethPair};
use limiter_tests::{isolated, poll, workspace_root};

#[test]
fn a_copied_binary_attaches_with_the_object_it_carries() {
    if !require_dataplane() {
        return;
    }
    let pair = VethPair::new("sb", 1);
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("limiter-daemon");
    std::fs::copy(env!("CARGO_BIN_EXE_limiter-daemon"), &bin).unwrap();
    let config = dir.path().join("limiter.toml");
    std::fs::write(
        &config,
        format!(
            "[kernel]\nmode = \"required\"\ninterfaces = [\"{}\"]\n[store]\nstate_dir = \"{}\"\n\
             [admin]\nlisten = \"\"\n[metrics]\nlisten = \"\"\n",
            pair.server_if,
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    let log = dir.path().join("daemon.log");
    // The source tree (and with it the eBPF crate's build output) is hidden: only what the
    // binary carries can be loaded.
    let root = workspace_root();
    let mut child = isolated::command(&pair.server, &[root.as_path()], &bin)
        .args(["run", "--config"])
        .arg(&config)
        .env_remove("LIMITER_EBPF_OBJECT")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let text = poll(Duration::from_secs(30), "the dataplane to be ready", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the copied daemon exited with {status}:\n{text}");
        }
        text.contains("kernel dataplane ready").then_some(text)
    });
    let attached = pair.attached_programs();
    limiter_tests::process::terminate(&mut child, Duration::from_secs(10));
    assert!(text.contains("object=embedded"), "{text}");
    assert!(
        attached.iter().any(|p| p.ends_with(":limiter_xdp")),
        "programs on {}: {attached:?}\n{text}",
        pair.server_if
    );
}
