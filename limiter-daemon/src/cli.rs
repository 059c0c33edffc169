//! Command-line interface: argument types and dispatch to the library.

use std::path::PathBuf;

use clap::{CommandFactory as _, Parser, Subcommand};

use crate::config::log::LogFormat;
use crate::kernel::cli::{DetachArgs, KernelArgs};

#[derive(Debug, Parser)]
#[command(
    name = "limiter-daemon",
    version,
    about = "Host limiter: XDP/TC dataplane + tiered HTTP metering"
)]
pub struct Cli {
    /// How log lines are written to stderr: `text` (default) or `json` (one object per
    /// line). Wins over the config's `[log] format`.
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormat>,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The log filter when `RUST_LOG` is unset: a replay's stdout is its report and its
    /// engine's per-lockout info lines would drown it, so it logs warnings only.
    pub fn default_log_filter(&self) -> &'static str {
        match self.command {
            Command::Replay(_) => "warn",
            _ => "info",
        }
    }

    /// The log format in force: the flag, else `run`'s config file's `[log] format`, else text.
    pub fn log_format(&self) -> LogFormat {
        self.log_format
            .or_else(|| match &self.command {
                Command::Run { config, .. } => crate::config::log::format_in_file(config),
                _ => None,
            })
            .unwrap_or_default()
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the version.
    Version,
    /// Validate a config file (with environment overrides) and print the effective limits.
    CheckConfig {
        /// The TOML config file.
        file: PathBuf,
    },
    /// Start the daemon: kernel dataplane, decision engine and HTTP surfaces, until SIGINT/SIGTERM.
    Run {
        /// Config file (TOML).
        #[arg(long)]
        config: PathBuf,
        /// Interfaces to attach to (default: the config's kernel.interfaces).
        #[arg(long = "iface")]
        ifaces: Vec<String>,
    },
    /// Operate the kernel maps directly (works while the daemon is stopped).
    Kernel(KernelArgs),
    /// Detach the program from every interface and remove every pin (under `--pin-path`, or the
    /// config's `[kernel] pin_path`).
    Detach(DetachArgs),
    /// Run access logs through the engine on their own timestamps and report what a config
    /// would have allowed, delayed and refused (in memory: no state, no kernel).
    Replay(crate::replay::ReplayArgs),
    /// Print the shell completion script for SHELL on stdout, e.g.
    /// `limiter-daemon completions bash > /etc/bash_completion.d/limiter-daemon`.
    Completions {
        #[arg(value_enum)]
        shell: limiter_common::manuals::Shell,
    },
    /// Write the man pages into DIR (`cargo xtask package` ships them).
    #[command(hide = true)]
    ManPages { dir: PathBuf },
}

/// Exit code for bad input (arguments, values, config): distinct from other failures (1).
/// clap's own usage errors exit with the same code.
pub const EXIT_USAGE: u8 = 2;

/// Exit code of a replay whose input could not be read to its end: the report was printed
/// but covers only the lines before the cut.
pub const EXIT_INCOMPLETE: u8 = 3;

/// The exit code for an error returned by [`run`].
pub fn exit_code(err: &anyhow::Error) -> u8 {
    let cut_short = |e: &(dyn std::error::Error + 'static)| {
        matches!(
            e.downcast_ref::<crate::replay::ReplayError>(),
            Some(crate::replay::ReplayError::CutShort { .. })
        )
    };
    if err.chain().any(cut_short) {
        return EXIT_INCOMPLETE;
    }
    let bad_input = |e: &(dyn std::error::Error + 'static)| {
        e.is::<crate::config::ConfigError>()
            || matches!(
                e.downcast_ref::<crate::replay::ReplayError>(),
                Some(
                    crate::replay::ReplayError::Open { .. } | crate::replay::ReplayError::Config(_)
                )
            )
    };
    if err.chain().any(bad_input) {
        EXIT_USAGE
    } else {
        1
    }
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    let log_flag = cli.log_format;
    match cli.command {
        Command::Version => {
            println!("{}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Command::CheckConfig { file } => {
            let env = crate::config::env_from_process();
            let cfg = crate::config::Config::load(&file, &env)?;
            // On stderr: stdout stays the effective limits, and the exit stays 0 (a warning).
            let token = cfg.http.api_token.as_ref();
            let grpc = &cfg.http.grpc.listen;
            for w in crate::config::api_token::api_listen_warnings(&cfg.http.api_listen, token)
                .into_iter()
                .chain(crate::config::api_token::listen_warnings(
                    "http.grpc_listen",
                    grpc,
                    token,
                ))
            {
                eprintln!("warning: {w}");
            }
            println!("{}: valid\n", file.display());
            print!("{}", crate::config::table::effective_limits(&cfg));
            Ok(())
        }
        Command::Run { config, ifaces } => crate::app::run::run(&config, ifaces, log_flag),
        Command::Kernel(args) => crate::kernel::cli::run_kernel(args),
        Command::Detach(args) => crate::kernel::cli::run_detach(args),
        Command::Replay(args) => Ok(crate::replay::run_cli(args)?),
        Command::Completions { shell } => {
            limiter_common::manuals::print_completions(Cli::command(), shell);
            Ok(())
        }
        Command::ManPages { dir } => limiter_common::manuals::man_pages(Cli::command(), &dir),
    }
}
