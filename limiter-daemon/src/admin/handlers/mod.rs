//! The admin API's handlers, one file per resource. Engine calls may block (the Valkey store
//! makes round trips), so [`blocking()`] runs them off the async workers; [`time_text`] writes
//! instants and deadlines the same way in every answer.

pub mod blocking;
pub mod clients;
pub mod config;
pub mod crawlers;
pub mod explain;
pub mod history;
pub mod kernel;
pub mod keys;
pub mod lists;
pub mod lockouts;
pub mod reload;
pub mod stats;
pub mod time_text;

pub use self::blocking::blocking;
pub use self::time_text::{rfc3339, secs_left, wall_ms};
