//! The run wiring: one [`Shutdown`](shutdown::Shutdown) for every background task, the
//! signals that trigger it ([`signals`]), `limiter-daemon run` itself ([`run`]), the config
//! reload ([`reload`], with [`config_diff`] saying what a reload may change), the descriptor
//! limit raised at start ([`nofile`]), and the last log line, what stays in the kernel
//! ([`stopped`]).

pub mod config_diff;
pub mod nofile;
pub mod reload;
pub mod run;
pub mod shutdown;
pub mod signals;
pub mod stopped;
