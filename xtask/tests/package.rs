//! `cargo xtask package`: the .deb's contents and conffiles, `systemd-analyze verify` on its
//! unit, and the unpacked daemon run with the unpacked config, with only the capabilities the
//! unit grants, inside a network namespace: it attaches and answers. Without any one of those
//! capabilities it cannot attach, so the unit's set is the smallest that works.
//!
//! What an operator reads comes with it: man pages `man -l` renders, bash completions `bash -n`
//! accepts (and the same script `limiterctl completions bash` prints), zsh and fish ones, the
//! docs, dashboard, alert rules and front-end examples, and a logrotate file `logrotate -d`
//! accepts that signals the unit the package ships. The unpacked `detach` finds its pins from
//! `--config` as from `--pin-path`.
//!
//! The package is made from the debug binaries `cargo xtask test` builds first (the same
//! layout and the same embedded object as a release build, without a release build's minutes).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use limiter_tests::netns::{require_dataplane, VethPair};
use limiter_tests::{daemon_binary, isolated, poll, process, workspace_root};

/// The package, built once for every test in this file, and its unpacked tree.
struct Built {
    deb: PathBuf,
    tree: PathBuf,
    _dir: tempfile::TempDir,
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let bin_dir = daemon_binary().parent().unwrap().to_path_buf();
        let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .current_dir(workspace_root())
            .args(["package", "--compression", "none", "--bin-dir"])
            .arg(&bin_dir)
            .arg("--out")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "xtask package: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let deb = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        assert!(deb.is_file(), "{}", deb.display());
        let tree = dir.path().join("root");
        run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tree));
        Built {
            deb,
            tree,
            _dir: dir,
        }
    })
}

fn run(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let out = cmd.output().unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn unit_text() -> String {
    std::fs::read_to_string(built().tree.join("lib/systemd/system/limiter.service")).unwrap()
}

/// The value of `key=` in the unit (its only occurrence).
fn unit_value(key: &str) -> String {
    let prefix = format!("{key}=");
    let text = unit_text();
    let mut found = text.lines().filter_map(|l| l.strip_prefix(&prefix));
    let value = found
        .next()
        .unwrap_or_else(|| panic!("no {key}= in the unit"));
    assert!(found.next().is_none(), "{key}= twice in the unit");
    value.to_string()
}

#[test]
fn the_package_holds_the_binaries_the_unit_and_the_config_as_a_conffile() {
    let b = built();
    let listing = run(Command::new("dpkg-deb").arg("-c").arg(&b.deb));
    for (mode, path) in [
        ("-rwxr-xr-x root/root", "./usr/bin/limiter-daemon"),
        ("-rwxr-xr-x root/root", "./usr/bin/limiterctl"),
        (
            "-rw-r--r-- root/root",
            "./lib/systemd/system/limiter.service",
        ),
        ("-rw-r--r-- root/root", "./etc/limiter/limiter.toml"),
        ("drwxr-xr-x root/root", "./var/lib/limiter/"),
    ] {
        assert!(
            listing
                .lines()
                .any(|l| l.starts_with(mode) && l.ends_with(&format!(" {path}"))),
            "{mode} {path} in:\n{listing}"
        );
    }
    let info = run(Command::new("dpkg-deb").arg("-I").arg(&b.deb));
    for field in ["Package: limiter", "Architecture: ", "Depends: libc6"] {
        assert!(info.contains(field), "{field} in:\n{info}");
    }
    let conffiles = run(Command::new("dpkg-deb")
        .arg("-I")
        .arg(&b.deb)
        .arg("conffiles"));
    assert_eq!(
        conffiles,
        "/etc/limiter/limiter.toml\n/etc/logrotate.d/limiter\n"
    );
    // The conffile is the example config, valid as shipped.
    let check = run(Command::new(b.tree.join("usr/bin/limiter-daemon"))
        .arg("check-config")
        .arg(b.tree.join("etc/limiter/limiter.toml")));
    assert!(!check.is_empty());
    let config = std::fs::read_to_string(b.tree.join("etc/limiter/limiter.toml")).unwrap();
    assert!(
        config.contains("state_dir = \"/var/lib/limiter\""),
        "{config}"
    );
    assert!(!config.contains("examples/"), "{config}");
}

#[test]
fn the_unit_verifies_and_says_what_the_issue_asks() {
    let b = built();
    for (key, value) in [
        (
            "ExecStart",
            "/usr/bin/limiter-daemon run --config /etc/limiter/limiter.toml",
        ),
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
        ("Restart", "on-failure"),
        ("ProtectSystem", "strict"),
        ("StateDirectory", "limiter"),
        ("NoNewPrivileges", "yes"),
        // Issue 35, D1: systemd's default soft limit of 1,024 let one client's idle
        // connections take every descriptor.
        ("LimitNOFILE", "65536"),
        ("LogsDirectory", "limiter"),
    ] {
        assert_eq!(unit_value(key), value, "{key}");
    }
    assert_eq!(
        unit_value("CapabilityBoundingSet"),
        unit_value("AmbientCapabilities")
    );
    // systemd is not PID 1 here, so the unit is verified, not started. verify checks that
    // ExecStart's binary exists: point it at the unpacked one.
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("limiter.service");
    let installed = b.tree.join("usr/bin/limiter-daemon");
    std::fs::write(
        &unit,
        unit_text().replace("/usr/bin/limiter-daemon", installed.to_str().unwrap()),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("systemd-analyze (Debian's systemd; scripts/setup.sh installs it)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.trim().is_empty(), "{err}");
}

/// `CAP_BPF CAP_NET_ADMIN` → `["bpf", "net_admin"]`.
fn unit_caps() -> Vec<String> {
    unit_value("CapabilityBoundingSet")
        .split_whitespace()
        .map(|c| c.strip_prefix("CAP_").unwrap().to_lowercase())
        .collect()
}

/// The unpacked daemon, run as systemd would run the unit: root with only `caps` in its
/// bounding, inheritable and ambient sets, the unpacked config, and `--iface` naming the veth
/// (the shipped config names no interface: the operator does). Its state directory and bpffs
/// (and the access log's directory) are private to it.
fn start(pair: &VethPair, caps: &[String], log: &Path) -> Child {
    let tree = &built().tree;
    let set = std::iter::once("-all".to_string())
        .chain(caps.iter().map(|c| format!("+{c}")))
        .collect::<Vec<_>>()
        .join(",");
    let private = [Path::new("/var/lib/limiter"), Path::new("/var/log/limiter")];
    isolated::command(&pair.server, &private, "setpriv")
        .args([
            "--bounding-set",
            &set,
            "--inh-caps",
            &set,
            "--ambient-caps",
            &set,
            "--",
        ])
        .arg(tree.join("usr/bin/limiter-daemon"))
        .args(["run", "--config"])
        .arg(tree.join("etc/limiter/limiter.toml"))
        .args(["--iface", &pair.server_if])
        .env_remove("LIMITER_EBPF_OBJECT")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

fn wait_for_log(child: &mut Child, log: &Path, needle: &str) -> String {
    poll(Duration::from_secs(30), needle, || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the daemon exited with {status}:\n{text}");
        }
        text.contains(needle).then_some(text)
    })
}

#[test]
fn the_unpacked_daemon_attaches_and_answers_with_only_the_units_capabilities() {
    if !require_dataplane() {
        return;
    }
    let pair = VethPair::new("pk", 1);
    let dir = tempfile::tempdir().unwrap();
    let caps = unit_caps();
    let log = dir.path().join("daemon.log");
    let mut child = start(&pair, &caps, &log);
    let text = wait_for_log(&mut child, &log, "kernel dataplane ready");
    assert!(text.contains("object=embedded"), "{text}");
    let attached = pair.attached_programs();
    assert!(
        attached.iter().any(|p| p.ends_with(":limiter_xdp")),
        "{attached:?}\n{text}"
    );
    // It answers: the decision API on the shipped config's port, and the packaged limiterctl
    // through the admin API with the token the daemon generated in its state directory.
    let decide = poll(Duration::from_secs(10), "the decision API", || {
        let out = isolated::join(child.id(), Path::new("/"), "curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .args(["-H", "content-type: application/json"])
            .args(["http://127.0.0.1:8081/v1/decide", "-d"])
            .arg(r#"{"ip":"203.0.113.9","method":"GET","path":"/","headers":{}}"#)
            .output()
            .unwrap();
        let code = String::from_utf8_lossy(&out.stdout).into_owned();
        (code != "000").then_some(code)
    });
    assert_eq!(decide, "200");
    let ctl = isolated::join(
        child.id(),
        Path::new("/"),
        built().tree.join("usr/bin/limiterctl"),
    )
    .arg("--config")
    .arg(built().tree.join("etc/limiter/limiter.toml"))
    .arg("kernel")
    .output()
    .unwrap();
    let ctl_out = String::from_utf8_lossy(&ctl.stdout);
    assert!(
        ctl.status.success() && ctl_out.contains("attached: true"),
        "{ctl_out}{}",
        String::from_utf8_lossy(&ctl.stderr)
    );
    process::terminate(&mut child, Duration::from_secs(15));

    // One capability fewer, whichever: the daemon cannot attach (the config's kernel.mode is
    // "auto", so it says so loudly and runs userspace-only).
    for missing in &caps {
        let fewer: Vec<String> = caps.iter().filter(|c| *c != missing).cloned().collect();
        let log = dir.path().join(format!("without-{missing}.log"));
        let mut child = start(&pair, &fewer, &log);
        let text = poll(
            Duration::from_secs(30),
            "the daemon's kernel verdict",
            || {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("the daemon exited with {status}:\n{text}");
                }
                (text.contains("KERNEL DATAPLANE NOT RUNNING")
                    || text.contains("kernel dataplane ready"))
                .then_some(text)
            },
        );
        assert!(
            !text.contains("kernel dataplane ready"),
            "attached without CAP_{}: the unit grants more than the daemon needs",
            missing.to_uppercase()
        );
        process::terminate(&mut child, Duration::from_secs(15));
        assert!(
            text.contains("Operation not permitted") || text.contains("Permission denied"),
            "without CAP_{}: {text}",
            missing.to_uppercase()
        );
    }
}

/// `cmd` run to its end: (success, stdout, stderr).
fn try_run(cmd: &mut Command) -> (bool, String, String) {
    let shown = format!("{cmd:?}");
    let out = cmd.output().unwrap_or_else(|e| panic!("{shown}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_package_carries_man_pages_completions_docs_examples_and_logrotate() {
    let b = built();
    let listing = run(Command::new("dpkg-deb").arg("-c").arg(&b.deb));
    let has = |path: &str| {
        assert!(
            listing.lines().any(
                |l| l.starts_with("-rw-r--r-- root/root") && l.ends_with(&format!(" ./{path}"))
            ),
            "{path} (0644, root) in:\n{listing}"
        );
    };
    for bin in ["limiter-daemon", "limiterctl"] {
        has(&format!("usr/share/man/man1/{bin}.1.gz"));
        has(&format!("usr/share/bash-completion/completions/{bin}"));
        has(&format!("usr/share/zsh/vendor-completions/_{bin}"));
        has(&format!("usr/share/fish/vendor_completions.d/{bin}.fish"));
    }
    // A page per subcommand, as `git` ships them.
    has("usr/share/man/man1/limiterctl-lockouts-add.1.gz");
    has("usr/share/man/man1/limiter-daemon-detach.1.gz");
    // Every doc, as in the repository.
    let docs = workspace_root().join("docs");
    let mut n = 0;
    for entry in std::fs::read_dir(&docs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            let name = path.file_name().unwrap().to_str().unwrap();
            has(&format!("usr/share/doc/limiter/docs/{name}"));
            n += 1;
        }
    }
    assert!(n >= 10, "{n} docs");
    for example in [
        "grafana/limiter.json",
        "prometheus/alerts.yml",
        "nginx/limiter-auth.conf",
        "nginx/limiter-proxy.conf",
        "caddy/Caddyfile",
        "haproxy/haproxy.cfg",
        "envoy/envoy.yaml",
        "traefik/dynamic.yml",
    ] {
        has(&format!("usr/share/doc/limiter/examples/{example}"));
        assert_eq!(
            std::fs::read(b.tree.join("usr/share/doc/limiter/examples").join(example)).unwrap(),
            std::fs::read(workspace_root().join("examples").join(example)).unwrap(),
            "{example} as in the repository"
        );
    }
    has("etc/logrotate.d/limiter");

    // man renders each top page, options and subcommands from the clap definitions.
    for (bin, says) in [
        ("limiterctl", ["lockouts", "completions", "--config"]),
        ("limiter-daemon", ["detach", "completions", "check-config"]),
    ] {
        let page = b.tree.join(format!("usr/share/man/man1/{bin}.1.gz"));
        let (ok, text, err) = try_run(
            Command::new("man")
                .args(["-l", "-P", "cat"])
                .arg(&page)
                .env("MANWIDTH", "80"),
        );
        assert!(ok && err.trim().is_empty(), "man -l {bin}: {err}");
        assert!(text.contains("NAME") && text.contains(bin), "{text}");
        for word in says {
            assert!(text.contains(word), "{word} in man {bin}:\n{text}");
        }
    }
    let (ok, text, err) = try_run(
        Command::new("man")
            .args(["-l", "-P", "cat"])
            .arg(b.tree.join("usr/share/man/man1/limiter-daemon-detach.1.gz")),
    );
    assert!(
        ok && text.contains("--pin-path") && text.contains("--config"),
        "{text}{err}"
    );

    // bash accepts the completion script, and loading it registers the command.
    for bin in ["limiter-daemon", "limiterctl"] {
        let script = b
            .tree
            .join("usr/share/bash-completion/completions")
            .join(bin);
        let (ok, _, err) = try_run(Command::new("bash").arg("-n").arg(&script));
        assert!(ok && err.is_empty(), "bash -n {bin}: {err}");
        let (ok, out, err) = try_run(
            Command::new("bash")
                .arg("-c")
                .arg(format!("source {}; complete -p {bin}", script.display())),
        );
        assert!(ok && out.contains(bin), "{out}{err}");
    }
    let shipped = std::fs::read_to_string(
        b.tree
            .join("usr/share/bash-completion/completions/limiterctl"),
    )
    .unwrap();
    let printed =
        run(Command::new(b.tree.join("usr/bin/limiterctl")).args(["completions", "bash"]));
    assert_eq!(
        printed, shipped,
        "limiterctl completions bash prints what ships"
    );
    // A reader that stops early (`| head -1`) ends it quietly.
    for bin in ["limiter-daemon", "limiterctl"] {
        let mut child = Command::new(b.tree.join("usr/bin").join(bin))
            .args(["completions", "zsh"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && err.is_empty(), "{bin}: {err}");
    }
    let (ok, _, err) =
        try_run(Command::new(b.tree.join("usr/bin/limiterctl")).args(["completions", "tcsh"]));
    assert!(!ok && err.contains("tcsh"), "{err}");

    // logrotate reads the file; it rotates the access log and signals the unit shipped here.
    let rotate = std::fs::read_to_string(b.tree.join("etc/logrotate.d/limiter")).unwrap();
    assert!(rotate.contains("/var/log/limiter/access.log {"), "{rotate}");
    assert!(
        rotate.contains("systemctl kill -s USR1 limiter.service"),
        "{rotate}"
    );
    assert!(b.tree.join("lib/systemd/system/limiter.service").is_file());
    let dir = tempfile::tempdir().unwrap();
    let (ok, out, err) = try_run(
        Command::new("logrotate")
            .arg("-d")
            .arg("-s")
            .arg(dir.path().join("state"))
            .arg(b.tree.join("etc/logrotate.d/limiter")),
    );
    assert!(ok && !err.contains("error"), "logrotate -d: {out}{err}");
}

#[test]
fn detach_takes_the_config_as_every_other_command_does() {
    let b = built();
    let daemon = b.tree.join("usr/bin/limiter-daemon");
    let dir = tempfile::tempdir().unwrap();
    // Not a bpffs: an empty directory holds no pins, which is all this checks.
    let pins = dir.path().join("pins");
    std::fs::create_dir(&pins).unwrap();
    let config = dir.path().join("limiter.toml");
    std::fs::write(
        &config,
        format!(
            "[kernel]\nmode = \"off\"\npin_path = \"{}\"\n[store]\nstate_dir = \"{}\"\n",
            pins.display(),
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    let said = format!("nothing pinned under {}", pins.display());
    let out = run(Command::new(&daemon)
        .arg("detach")
        .arg("--config")
        .arg(&config));
    assert!(out.contains(&said), "{out}");
    let out = run(Command::new(&daemon)
        .arg("detach")
        .arg("--pin-path")
        .arg(&pins));
    assert!(out.contains(&said), "{out}");
    // Both at once, or a config that does not load: a usage error naming the problem.
    let out = Command::new(&daemon)
        .args(["detach", "--pin-path"])
        .arg(&pins)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let missing = dir.path().join("missing.toml");
    let out = Command::new(&daemon)
        .arg("detach")
        .arg("--config")
        .arg(&missing)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("missing.toml") && err.contains("--pin-path"),
        "{err}"
    );
}
