//! Project tasks: `cargo xtask setup | build-ebpf | run | package | test | bench <what> | fuzz`.
//!
//! Every task that needs prerequisites runs the idempotent `scripts/setup.sh` first, so a fresh
//! machine needs nothing done by hand.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

mod demo;
mod package;

#[derive(Parser)]
#[command(name = "xtask")]
struct Args {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install prerequisites (apt packages, rust-src, bpf-linker, valkey-server). Idempotent.
    Setup,
    /// Build the eBPF object with the nightly toolchain.
    BuildEbpf,
    /// Set up, build, and run the daemon on its embedded store, attached to an interface. When
    /// nothing listens on the config's upstream, a demo upstream answering 200 runs beside it.
    Run {
        /// Config file.
        #[arg(long, default_value = "examples/limiter.toml")]
        config: PathBuf,
        /// Interfaces to attach to (default: the config's).
        #[arg(long = "iface")]
        ifaces: Vec<String>,
        /// Run the binaries already in this directory instead of setting up and building.
        #[arg(long)]
        bin_dir: Option<PathBuf>,
    },
    /// Build the release binaries and a .deb of them with the systemd unit, the config, man
    /// pages, shell completions, the docs and examples, and the logrotate file.
    Package {
        /// Package the binaries already in this directory instead of building release ones.
        #[arg(long)]
        bin_dir: Option<PathBuf>,
        /// Where the .deb is written.
        #[arg(long, default_value = "target/debian")]
        out: PathBuf,
        /// dpkg-deb's compression (`none` for a quick package in tests).
        #[arg(long, default_value = "xz", value_parser = ["xz", "gzip", "zstd", "none"])]
        compression: String,
    },
    /// Set up, build, and run every test (unit, kernel TEST_RUN, netns end-to-end, nginx).
    Test {
        /// Extra arguments for `cargo test` (e.g. a test name filter).
        #[arg(last = true)]
        rest: Vec<String>,
    },
    /// Run a benchmark and print its table.
    Bench { what: BenchKind },
    /// Set up, build the cargo-fuzz targets with the nightly, and run each for a while; fails
    /// naming the targets that crashed (their inputs are kept under `fuzz/artifacts/`).
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        /// Targets to run (default: all of `fuzz/fuzz_targets/`).
        targets: Vec<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum BenchKind {
    Kernel,
    Engine,
    Proxy,
    /// Memory per held (scan-delayed) request, and an unmetered client's p99 meanwhile.
    Hold,
    /// The shared store against the embedded one: decisions/s, proxy requests/s, Valkey
    /// commands per decision, lockout propagation between hosts.
    Store,
    /// Four hosts on one Valkey with and without leases against the embedded store, on one
    /// Zipf trace: decisions/s, commands per decision, over- and under-admission.
    Fleet,
    /// The IP-to-ASN table: load time for 500,000 ranges, ns per lookup.
    Asn,
    /// A SYN flood from locked sources over a veth pair: packets dropped per receiver
    /// CPU-second with the XDP program, an nftables set and no filter (root).
    Flood,
    /// `limiter-daemon replay` lines/s on one core (combined, JSON lines, gzip) beside a
    /// parse-only baseline.
    Replay,
    /// The ladder under 3× overload against no shedding and tier-blind shedding: goodput, success
    /// and latency per tier, the app's utilisation, the adaptive limit over time.
    Overload,
}

fn main() {
    let args = Args::parse();
    if let Err(err) = run(args.task) {
        eprintln!("xtask: {err:#}");
        std::process::exit(1);
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn sh(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd.status().with_context(|| format!("starting {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

fn setup() -> Result<()> {
    sh(Command::new("bash").arg(root().join("scripts/setup.sh")))
}

fn build_ebpf() -> Result<()> {
    let dir = root().join("limiter-ebpf");
    sh(Command::new("cargo")
        .current_dir(&dir)
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("RUSTC")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .args([
            "+nightly",
            "build",
            "--release",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
        ]))
    .context("building the eBPF object (needs `cargo xtask setup` for rust-src and bpf-linker)")
}

/// Sets up and builds the release binaries (the eBPF object inside them); returns their
/// directory.
fn release_build() -> Result<PathBuf> {
    setup()?;
    build_ebpf()?;
    sh(cargo().args([
        "build",
        "--release",
        "-p",
        "limiter-daemon",
        "-p",
        "limiter-ctl",
        "--bins",
    ]))?;
    Ok(root().join("target/release"))
}

fn cargo() -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(root());
    c
}

fn run(task: Task) -> Result<()> {
    match task {
        Task::Setup => setup(),
        Task::BuildEbpf => build_ebpf(),
        Task::Run {
            config,
            ifaces,
            bin_dir,
        } => {
            let bin_dir = match bin_dir {
                Some(dir) => dir,
                None => release_build()?,
            };
            if let Some(addr) = demo::start_if_absent(&config)? {
                println!(
                    "xtask: nothing listens on {addr}, the config's [http] upstream: a demo \
                     upstream answering 200 runs there now (it stops with the daemon)"
                );
            }
            let mut c = Command::new(bin_dir.join("limiter-daemon"));
            c.arg("run").arg("--config").arg(&config);
            for i in &ifaces {
                c.arg("--iface").arg(i);
            }
            sh(&mut c)
        }
        Task::Package {
            bin_dir,
            out,
            compression,
        } => {
            let bin_dir = match bin_dir {
                Some(dir) => dir,
                None => release_build()?,
            };
            let deb = package::build(&bin_dir, &root().join(out), &compression)?;
            println!("{}", deb.display());
            Ok(())
        }
        Task::Test { rest } => {
            setup()?;
            build_ebpf()?;
            // The end-to-end tests start the real daemon and limiterctl binaries, so build them
            // before they run.
            sh(cargo().args([
                "build",
                "-p",
                "limiter-daemon",
                "-p",
                "limiter-ctl",
                "--bins",
            ]))?;
            // Every failure in one run, not the first binary's alone.
            sh(cargo()
                .args(["test", "--workspace", "--no-fail-fast"])
                .args(&rest))?;
            // A filtered run is someone chasing one test: no conformance or fuzzing pass then.
            if rest.is_empty() {
                conformance()?;
                fuzz(CI_FUZZ_SECONDS, &[], FuzzBuild::Quick)?;
            }
            Ok(())
        }
        Task::Bench { what } => {
            setup()?;
            build_ebpf()?;
            let name = match what {
                BenchKind::Kernel => "kernel",
                BenchKind::Engine => "engine",
                BenchKind::Proxy => "proxy",
                BenchKind::Hold => "hold",
                BenchKind::Store => "store",
                BenchKind::Fleet => "fleet",
                BenchKind::Asn => "asn",
                BenchKind::Flood => "flood",
                BenchKind::Replay => "replay",
                BenchKind::Overload => "overload",
            };
            sh(cargo().args([
                "build",
                "--profile",
                "bench-fast",
                "-p",
                "limiter-daemon",
                "--bins",
            ]))?;
            // The harness in the same profile as the daemon: one optimised build of the
            // dependencies instead of two (the `bench` profile differs from `bench-fast` only
            // in debug info, which nothing measured depends on).
            sh(cargo().args([
                "bench",
                "--profile",
                "bench-fast",
                "-p",
                "limiter-daemon",
                "--bench",
                name,
            ]))
        }
        Task::Fuzz { seconds, targets } => {
            setup()?;
            fuzz(seconds, &targets, FuzzBuild::Full)
        }
    }
}

/// The modules of the `engine` test binary that make the store conformance suite: `cargo test
/// --workspace` runs them on the embedded store, and [`conformance`] again on a real Valkey and
/// a real Valkey Cluster.
const CONFORMANCE_SUITES: [&str; 7] = [
    "engine_rules::",
    "engine_networks::",
    "engine_burst_after_budget::",
    "engine_session_quota::",
    "engine_shadow::",
    "engine_admin::",
    "engine_concurrency::",
];

/// Runs the conformance suite on each remote store (`LIMITER_TEST_STORE`; the tests start the
/// servers on free loopback ports): the same cases, the same answers required.
fn conformance() -> Result<()> {
    for store in ["valkey", "cluster"] {
        let mut c = cargo();
        c.args(["test", "-p", "limiter-daemon", "--test", "engine", "--"])
            .args(CONFORMANCE_SUITES)
            .env("LIMITER_TEST_STORE", store);
        sh(&mut c).with_context(|| format!("the store conformance suite on {store}"))?;
    }
    Ok(())
}

/// Seconds per fuzz target in `cargo xtask test` (the CI pass): 3 min for the six targets,
/// enough for the slowest target (`config`) to get through its committed corpus and seeds
/// and mutate beyond them.
const CI_FUZZ_SECONDS: u64 = 30;

/// How the fuzz targets are built. The options go to `cargo fuzz build` and, identical, to
/// `cargo fuzz run` (which would rebuild otherwise).
#[derive(Clone, Copy)]
enum FuzzBuild {
    /// `cargo xtask fuzz`: optimised, with AddressSanitizer; 16 codegen units because the
    /// build is the larger part of a short run. 15 min from clean on this 2-core machine.
    Full,
    /// The CI pass: unoptimised and without a sanitizer, debug assertions and overflow checks
    /// kept. It builds in about 4 min instead of 15 and runs 6 to 100 times slower, which a
    /// pass that replays the committed corpus and mutates for half a minute can afford
    /// (docs/fuzzing.md).
    Quick,
}

impl FuzzBuild {
    fn args(self) -> &'static [&'static str] {
        match self {
            FuzzBuild::Full => &["--codegen-units", "16"],
            FuzzBuild::Quick => &["--dev", "--sanitizer", "none"],
        }
    }
}

/// `cargo +nightly fuzz` in `fuzz/`, free of the stable toolchain's environment.
fn cargo_fuzz() -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(root().join("fuzz"))
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("RUSTC")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .args(["+nightly", "fuzz"]);
    c
}

/// Builds every fuzz target once, then runs each (or those named) for `seconds`. Each run
/// starts from the committed corpus and the hand-written seeds and writes what it finds to the
/// git-ignored `fuzz/corpus-run/`, so the committed corpus changes only by `cargo fuzz cmin`.
fn fuzz(seconds: u64, only: &[String], build: FuzzBuild) -> Result<()> {
    let dir = root().join("fuzz");
    let mut targets = Vec::new();
    for entry in std::fs::read_dir(dir.join("fuzz_targets")).context("listing fuzz targets")? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            if only.is_empty() || only.contains(&name) {
                targets.push(name);
            }
        }
    }
    targets.sort();
    if let Some(unknown) = only.iter().find(|t| !targets.contains(t)) {
        bail!("no fuzz target {unknown:?} in fuzz/fuzz_targets/");
    }
    sh(cargo_fuzz().arg("build").args(build.args()))
        .context("building the fuzz targets (`cargo xtask setup`)")?;
    let mut crashed = Vec::new();
    for t in &targets {
        let scratch = dir.join("corpus-run").join(t);
        std::fs::create_dir_all(&scratch)
            .with_context(|| format!("creating {}", scratch.display()))?;
        let mut run = cargo_fuzz();
        run.args(["run", t]).args(build.args()).arg(&scratch);
        for seeds in [dir.join("corpus").join(t), dir.join("seeds").join(t)] {
            if seeds.is_dir() {
                run.arg(seeds);
            }
        }
        run.arg("--").args([
            format!("-max_total_time={seconds}"),
            "-rss_limit_mb=2048".into(),
            "-timeout=10".into(),
            "-print_final_stats=1".into(),
        ]);
        eprintln!("xtask: fuzzing {t} for {seconds} s");
        if let Err(err) = sh(&mut run) {
            eprintln!("xtask: fuzz target {t} failed: {err:#}");
            crashed.push(t.as_str());
        }
    }
    if !crashed.is_empty() {
        bail!(
            "fuzz targets crashed: {} (inputs under fuzz/artifacts/<target>/)",
            crashed.join(", ")
        );
    }
    eprintln!(
        "xtask: {} fuzz targets ran {seconds} s each without a crash",
        targets.len()
    );
    Ok(())
}
