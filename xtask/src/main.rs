//! Project tasks: `cargo xtask setup | build-ebpf | run | test | bench <what>`.
//!
//! Every task that needs prerequisites runs the idempotent `scripts/setup.sh` first, so a fresh
//! machine needs nothing done by hand.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

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
    /// Set up, build, and run the daemon on its embedded store, attached to an interface.
    Run {
        /// Config file.
        #[arg(long, default_value = "examples/limiter.toml")]
        config: PathBuf,
        /// Interfaces to attach to (default: the config's).
        #[arg(long = "iface")]
        ifaces: Vec<String>,
    },
    /// Set up, build, and run every test (unit, kernel TEST_RUN, netns end-to-end, nginx).
    Test {
        /// Extra arguments for `cargo test` (e.g. a test name filter).
        #[arg(last = true)]
        rest: Vec<String>,
    },
    /// Run a benchmark and print its table.
    Bench { what: BenchKind },
}

#[derive(Clone, Copy, ValueEnum)]
enum BenchKind {
    Kernel,
    Engine,
    Proxy,
    /// Memory per held (scan-delayed) request, and an unmetered client's p99 meanwhile.
    Hold,
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

fn cargo() -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(root());
    c
}

fn run(task: Task) -> Result<()> {
    match task {
        Task::Setup => setup(),
        Task::BuildEbpf => build_ebpf(),
        Task::Run { config, ifaces } => {
            setup()?;
            build_ebpf()?;
            sh(cargo().args(["build", "--release", "-p", "limiter-daemon"]))?;
            let mut c = Command::new(root().join("target/release/limiter-daemon"));
            c.arg("run").arg("--config").arg(&config);
            for i in &ifaces {
                c.arg("--iface").arg(i);
            }
            sh(&mut c)
        }
        Task::Test { rest } => {
            setup()?;
            build_ebpf()?;
            // The end-to-end tests start the real daemon binary, so build it before they run.
            sh(cargo().args(["build", "-p", "limiter-daemon", "--bins"]))?;
            sh(cargo().args(["test", "--workspace"]).args(&rest))
        }
        Task::Bench { what } => {
            setup()?;
            build_ebpf()?;
            let name = match what {
                BenchKind::Kernel => "kernel",
                BenchKind::Engine => "engine",
                BenchKind::Proxy => "proxy",
                BenchKind::Hold => "hold",
            };
            sh(cargo().args([
                "build",
                "--profile",
                "bench-fast",
                "-p",
                "limiter-daemon",
                "--bins",
            ]))?;
            sh(cargo().args(["bench", "-p", "limiter-daemon", "--bench", name]))
        }
    }
}
