//! The config loader (`Config::from_toml_str`, then what `check-config` does with the result:
//! the `[http]` table's validation and the effective-limits table) on arbitrary text.
//!
//! Environment overrides come from the text itself: a comment line `#env NAME=value` sets
//! `NAME`, so seeds stay valid TOML. Inputs that may name a file to read (`*_file` keys) are
//! skipped: the loader would read whatever path the fuzzer wrote, `/dev/zero` included.
//!
//! Besides "never panics":
//! - an error says something, and the line it names is a line of the text;
//! - an accepted config's `[http]` table validates or is refused without a panic, and its
//!   effective limits render.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use limiter_daemon::config::table::effective_limits;
use limiter_daemon::config::{Config, ConfigError, EnvMap};
use limiter_daemon::identity::IdentityResolver;

fn env_of(text: &str) -> EnvMap {
    text.lines()
        .filter_map(|l| l.strip_prefix("#env "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .collect()
}

/// Whether a line other than a whole-line comment mentions `file` (the `*_file` keys, however
/// quoted), or the text mentions a device or kernel file anywhere.
fn names_a_file(text: &str) -> bool {
    text.lines()
        .any(|l| !l.trim_start().starts_with('#') && l.contains("file"))
        || ["/dev", "/proc", "/sys"].iter().any(|p| text.contains(p))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if names_a_file(text) {
        return;
    }
    let env = env_of(text);
    let path = Path::new("fuzz.toml");
    let got = Config::from_toml_str(text, path, &env);
    let lines = text.lines().count() + 1;
    match &got {
        Ok(cfg) => {
            assert!(!effective_limits(cfg).is_empty());
            // `[http]` is validated with the rest: a loaded config's listeners are concrete.
            assert!(cfg.http.max_header_count.get() > 0);
            // What `run` derives from a config next.
            let _ = IdentityResolver::new(cfg);
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            match e {
                ConfigError::Parse { line: Some(l), .. }
                | ConfigError::InvalidAt { line: l, .. } => {
                    assert!((1..=lines).contains(l), "line {l} of {lines}: {e}")
                }
                _ => {}
            }
        }
    }
});
