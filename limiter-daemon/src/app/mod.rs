//! The run wiring: one [`Shutdown`](shutdown::Shutdown) for every background task, the
//! signals that trigger it ([`signals`]), `limiter-daemon run` itself ([`run`]), and the
//! config reload ([`reload`], with [`config_diff`] saying what a reload may change), and the
//! descriptor limit raised at start ([`nofile`]).

pub mod config_diff;
pub mod nofile;
pub mod reload;
pub mod run;
pub mod shutdown;
pub mod signals;
