//! `[engine]`: how the decision engine runs as a whole. `shadow = true` is shadow mode for
//! every route (a route can also opt in alone, `shadow = true` in its `[[routes]]` entry):
//! every decision is made and counted, nothing is enforced.

use serde::Deserialize;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEngine {
    pub shadow: Option<bool>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineSettings {
    /// Shadow mode everywhere: decide and count, say what would have happened (a response
    /// header, `/v1/decide`'s `shadow`, metrics), but reject, delay, strike and lock nothing.
    pub shadow: bool,
}

impl EngineSettings {
    pub fn validate(raw: RawEngine) -> Self {
        EngineSettings {
            shadow: raw.shadow.unwrap_or(false),
        }
    }
}
