//! `limiterctl`: the admin API from a shell, over HTTP; it shares only `limiter-common` with the
//! daemon (the argument parsers, the `[admin]` section, the admin API's marker). Arguments are
//! parsed and checked here (a bad IP,
//! CIDR, duration, tier or limit exits 2 before anything is sent), [`target`] finds the daemon
//! and its token, [`client`] makes the request, [`render`] prints tables or (`--json`, anywhere
//! on the line) the daemon's JSON. Exit codes: 0 ok, 1 refused by the daemon, 2 bad arguments,
//! 3 daemon unreachable, or what answers is not the limiter's admin API. [`top`] is the live
//! view, polling the same API.

mod args;
mod client;
mod render;
mod target;
mod top;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory as _, Parser as _};

use args::Ctl;

/// Exit codes, as DESIGN.md names them.
pub const EXIT_OK: u8 = 0;
pub const EXIT_REFUSED: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_UNREACHABLE: u8 = 3;

fn main() -> ExitCode {
    main_with(std::env::args_os())
}

/// Parses `argv`, runs the verb, returns the process's exit code.
fn main_with(argv: impl IntoIterator<Item = OsString>) -> ExitCode {
    let ctl = match Ctl::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { EXIT_OK };
            // Printing the usage can only fail on a closed stream; the exit code says enough.
            drop(e.print());
            return ExitCode::from(code);
        }
    };
    match &ctl.command {
        args::Command::Completions { shell } => {
            limiter_common::manuals::print_completions(Ctl::command(), *shell);
            return ExitCode::from(EXIT_OK);
        }
        args::Command::ManPages { dir } => {
            return match limiter_common::manuals::man_pages(Ctl::command(), dir) {
                Ok(()) => ExitCode::from(EXIT_OK),
                Err(e) => {
                    eprintln!("limiterctl: {e:#}");
                    ExitCode::from(EXIT_REFUSED)
                }
            };
        }
        _ => {}
    }
    if let Err(e) = args::check(&ctl.command) {
        eprintln!("limiterctl: {e}");
        return ExitCode::from(EXIT_USAGE);
    }
    let json = ctl.json;
    let target = match target::resolve(&ctl.conn) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("limiterctl: {e:#}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("limiterctl: starting the runtime: {e}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    if let args::Command::Top(a) = &ctl.command {
        return match top::run(&rt, &target, a) {
            Ok(()) => ExitCode::from(EXIT_OK),
            Err(e) => {
                eprintln!("limiterctl: {e}");
                ExitCode::from(EXIT_UNREACHABLE)
            }
        };
    }
    let req = args::request(&ctl.command);
    let answer = rt.block_on(client::send_all(&target, req));
    match answer {
        Err(e) if e.is::<client::NotAdminApi>() => {
            eprintln!("limiterctl: {} is {e}", target.url);
            ExitCode::from(EXIT_UNREACHABLE)
        }
        Err(e) => {
            eprintln!("limiterctl: daemon unreachable at {}: {e:#}", target.url);
            ExitCode::from(EXIT_UNREACHABLE)
        }
        Ok(a) if !a.ok() => {
            render::refusal(&a, json);
            ExitCode::from(EXIT_REFUSED)
        }
        Ok(a) => {
            render::success(&ctl.command, &a.body, json);
            ExitCode::from(EXIT_OK)
        }
    }
}
