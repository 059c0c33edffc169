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
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Version => {
            println!("{}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
    }
}
