//! Command-line interface: argument types and dispatch to the library.

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "limiter-daemon",
    version,
    about = "Host limiter: XDP/TC dataplane + tiered HTTP metering"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Placeholder until the issues land.
    Version,
    /// Validate a config file (with environment overrides) and print the effective limits.
    CheckConfig {
        /// The TOML config file.
        file: std::path::PathBuf,
    },
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Version => {
            println!("{}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Command::CheckConfig { file } => {
            let env = crate::config::env_from_process();
            let cfg = crate::config::Config::load(&file, &env)?;
            println!("{}: valid\n", file.display());
            print!("{}", crate::config::table::effective_limits(&cfg));
            Ok(())
        }
    }
}
