//! `limiterctl`: the admin API from a shell (logic in `limiter_daemon::ctl`).

fn main() -> std::process::ExitCode {
    limiter_daemon::ctl::main_with(std::env::args_os())
}
