//! Thin entry point: parse arguments, set up tracing (stderr), hand over to the library, print
//! errors with their chain. Bad input exits 2, other failures 1.

use std::io::IsTerminal as _;

use clap::Parser;
use limiter_daemon::config::log::LogFormat;

// The proxy allocates a little on every request (header maps, bodies, futures); mimalloc's
// thread-local free lists cost less per allocation than glibc's arenas (docs/http.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = limiter_daemon::cli::Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(cli.default_log_filter()));
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    let log_format = cli.log_format();
    match log_format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
    }
    match limiter_daemon::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            // The last line of a failed start: in the log format in force, so a JSON log stays
            // JSON line by line.
            match log_format {
                LogFormat::Json => tracing::error!(error = %format!("{err:#}"), "exiting"),
                LogFormat::Text => eprintln!("error: {err:#}"),
            }
            std::process::ExitCode::from(limiter_daemon::cli::exit_code(&err))
        }
    }
}
