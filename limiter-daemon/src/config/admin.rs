//! The `[admin]` section lives in `limiter-common` (limiterctl reads it too); its errors are the
//! config's.

pub use limiter_common::admin_section::{
    AdminSettings, RawAdmin, DEFAULT_LISTEN, GENERATED_TOKEN_FILE, TOKEN_ENV,
};

use super::ConfigError;

impl From<limiter_common::admin_section::Invalid> for ConfigError {
    fn from(e: limiter_common::admin_section::Invalid) -> Self {
        ConfigError::invalid(e.field, e.message)
    }
}
