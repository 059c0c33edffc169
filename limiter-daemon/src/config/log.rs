//! The `[log]` section: how the daemon writes its log lines to stderr. `format = "text"` (the
//! default, for people) or `"json"` (one JSON object per line, for collectors). The
//! `--log-format` flag wins over the file.
//!
//! Logging starts before the config is validated (so a config error can itself be logged), so
//! [`format_in_file`] reads just this section from the file, best effort; the full validation
//! later refuses a bad value with its field and line.

use std::path::Path;

use serde::Deserialize;

use super::ConfigError;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (colour on a terminal).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `fields`, `target`.
    Json,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// `[log]` as written in the file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    /// `"text"` (default) or `"json"`.
    pub format: Option<String>,
}

/// The validated `[log]` section.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogSettings {
    pub format: LogFormat,
}

impl LogSettings {
    pub fn validate(raw: RawLog) -> Result<Self, ConfigError> {
        let format = match raw.format.as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(ConfigError::invalid(
                    "log.format",
                    format!("{other:?}: must be \"text\" or \"json\""),
                ))
            }
        };
        Ok(LogSettings { format })
    }
}

/// `[log] format` of the file at `path`, if it can be read and says one; `None` otherwise (the
/// full load reports what is wrong).
pub fn format_in_file(path: &Path) -> Option<LogFormat> {
    #[derive(Deserialize)]
    struct OnlyLog {
        log: Option<RawLog>,
    }
    let text = std::fs::read_to_string(path).ok()?;
    let only: OnlyLog = toml::from_str(&text).ok()?;
    LogSettings::validate(only.log?).ok().map(|s| s.format)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_errors() {
        let v = |f: Option<&str>| {
            LogSettings::validate(RawLog {
                format: f.map(str::to_string),
            })
        };
        assert_eq!(v(None).unwrap().format, LogFormat::Text);
        assert_eq!(v(Some("json")).unwrap().format, LogFormat::Json);
        assert!(v(Some("xml"))
            .unwrap_err()
            .to_string()
            .contains("log.format"));
    }

    #[test]
    fn format_is_read_from_a_file_without_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "[tiers.anon]\nburst = 5\n[log]\nformat = \"json\"\n").unwrap();
        assert_eq!(format_in_file(&p), Some(LogFormat::Json));
        std::fs::write(&p, "[tiers.anon]\nburst = 5\n").unwrap();
        assert_eq!(format_in_file(&p), None);
    }
}
