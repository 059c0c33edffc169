//! Thin entry point: parse arguments, hand over to the library, print errors with their chain.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = limiter_daemon::cli::Cli::parse();
    match limiter_daemon::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
