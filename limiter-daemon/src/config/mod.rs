//! Configuration: one TOML file, validated in two stages (raw serde structs → validated types),
//! with environment overrides. Errors name the field; nothing falls back silently.

pub mod error;
pub mod http;
pub mod kernel;

pub use error::ConfigError;
