//! The name `run` had before `app` held the wiring: [`crate::app::run`] is the daemon.

pub use crate::app::run::{run, DaemonConfig};
