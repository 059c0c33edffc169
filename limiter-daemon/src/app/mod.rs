//! The run wiring: one [`Shutdown`](shutdown::Shutdown) for every background task, the
//! signals that trigger it ([`signals`]), and `limiter-daemon run` itself ([`run`]).

pub mod run;
pub mod shutdown;
pub mod signals;
