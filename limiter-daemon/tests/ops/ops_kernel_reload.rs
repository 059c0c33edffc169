//! Reload on the real dataplane: the daemon binary runs in a network namespace this test
//! creates, attached (TC) to a veth, maps pinned under a private directory. A SIGHUP with new
//! kernel ceilings and protected ports rewrites the kernel's config at once (read back from
//! the pins with `kernel status`); a change of interfaces is refused as needing a restart; on
//! SIGTERM the daemon exits and the program stays attached through its pins. Needs root and
//! the built object: skipped outside CI without them, a failure under `CI=true`.

#[allow(
    dead_code,
    reason = "this test starts the daemon binary; it does not attach in-process"
)]
use crate::kernel_support;

use std::process::{Command, Stdio};

use limiter_tests::eventually;

fn status(pins: &std::path::Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_limiter-daemon"))
        .args(["kernel", "status", "--pin-path"])
        .arg(pins)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn sighup_rewrites_kernel_ceilings_and_ports_and_pins_outlive_sigterm() {
    let Some(kernel_support::Dataplane {
        pair,
        listener,
        port,
        pins,
    }) = kernel_support::dataplane("lor", 1, "limiter-reload-")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("limiter.toml");
    let text = |ceiling: u32, ports: &str, iface: &str| {
        format!(
            "[kernel]\nmode = \"required\"\nattach = \"tc\"\ninterfaces = [\"{iface}\"]\npin_path = \"{}\"\n\
             protected_ports = [{ports}]\n[kernel.ceiling.anon]\nburst = {ceiling}\nper_second = 5\n\
             [store]\nstate_dir = \"{}\"\n[metrics]\nlisten = \"\"\n",
            pins.0.display(),
            dir.path().join("state").display()
        )
    };
    std::fs::write(&config, text(40, &port.to_string(), &pair.server_if)).unwrap();
    let log = dir.path().join("daemon.log");
    let mut child = Command::new("nsenter")
        .arg(format!("--net={}", pair.server.path().display()))
        .arg(env!("CARGO_BIN_EXE_limiter-daemon"))
        .args(["run", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let wait = |child: &mut std::process::Child, needle: &str, n: usize| {
        eventually(needle, || {
            assert!(
                child.try_wait().unwrap().is_none(),
                "daemon exited:\n{}",
                read()
            );
            (read().matches(needle).count() >= n).then_some(())
        })
    };
    wait(&mut child, "kernel dataplane ready", 1);
    let before = status(&pins.0);
    assert!(before.contains("anon 40+5/s"), "{before}");

    std::fs::write(&config, text(25, &format!("{port}, 8443"), &pair.server_if)).unwrap();
    // SAFETY: kill(2) on the child this test spawned (nsenter execs the daemon in place).
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    let hup = || unsafe { libc::kill(pid, libc::SIGHUP) };
    assert_eq!(hup(), 0);
    wait(&mut child, "config reload applied", 1);
    let after = status(&pins.0);
    assert!(after.contains("anon 25+5/s"), "{after}");
    let ports = after.lines().find(|l| l.starts_with("ports:")).unwrap();
    assert!(
        ports.contains("8443") && ports.contains(&port.to_string()),
        "{after}"
    );

    std::fs::write(&config, text(10, "80", "lo")).unwrap();
    assert_eq!(hup(), 0);
    wait(&mut child, "config reload refused", 1);
    assert!(read().contains("kernel.interfaces"), "{}", read());
    assert!(
        status(&pins.0).contains("anon 25+5/s"),
        "a refused reload wrote the kernel"
    );

    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let exit = eventually("the daemon's exit", || child.try_wait().unwrap());
    assert!(exit.success(), "{exit}\n{}", read());
    assert!(
        !pair.attached_programs().is_empty(),
        "the program left with the daemon"
    );
    assert!(status(&pins.0).contains("anon 25+5/s"));
    drop(listener);
    drop(pins);
}
