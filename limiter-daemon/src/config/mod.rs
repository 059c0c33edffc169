//! Configuration: one TOML file, validated in two stages (raw serde structs → validated types),
//! with environment overrides. Errors name the field (and the line); nothing falls back
//! silently.
//!
//! ```no_run
//! use limiter_daemon::config::{Config, env_from_process};
//! let cfg = Config::load("limiter.toml".as_ref(), &env_from_process())?;
//! # Ok::<(), limiter_daemon::config::ConfigError>(())
//! ```
//!
//! Every section is validated once, by [`file`]'s [`Config::from_raw`], `[http]` included
//! ([`Config::http`]): callers get checked values and every field error carries the file and
//! line.

pub mod admin;
pub mod agents;
pub mod api_token;
pub mod asn;
pub mod crawler_ranges;
pub mod crawlers;
pub mod engine;
pub mod env;
pub mod error;
pub mod field_path;
pub mod file;
pub mod grpc;
pub mod h2;
pub mod http;
pub mod identity;
pub mod jwt;
pub mod kernel;
pub mod keys;
pub mod locate;
pub mod lockout;
pub mod log;
pub mod metrics;
pub mod nets;
pub mod networks;
pub mod overload;
pub mod proof_sources;
pub mod proxy_protocol;
pub mod renamed;
pub mod routes;
pub mod store;
pub mod table;
pub mod tiers;
pub mod tls;
pub mod upgrade;

pub use admin::AdminSettings;
pub use agents::AgentSettings;
pub use crawlers::CrawlerSettings;
pub use engine::EngineSettings;
pub use env::{env_from_process, EnvMap, ENV_VARS};
pub use error::ConfigError;
pub use file::{Config, RawConfig};
pub use http::HttpSettings;
pub use identity::{ForwardedHeader, IdentitySettings};
pub use jwt::{JwtAlgorithm, JwtSettings};
pub use kernel::KernelSettings;
pub use keys::KeySettings;
pub use lockout::LockoutSettings;
pub use networks::NetworkSettings;
pub use routes::{Limits, OverQuota, Route, RouteTable};
pub use store::{HashMode, StoreSettings};
pub use tiers::{QuotaSettings, TierLimits, TierTable};
pub use upgrade::UpgradePaths;
