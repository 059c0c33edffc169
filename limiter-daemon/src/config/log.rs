//! The `[log]` section: how the daemon writes its log lines to stderr. `format = "text"` (the
//! default, for people) or `"json"` (one JSON object per line, for collectors). The
//! `--log-format` flag wins over the file. `access` and `access_format` say where and how the
//! access log is written (one line per request, see [`crate::edge::access_log`]).
//!
//! Logging starts before the config is validated (so a config error can itself be logged), so
//! [`format_in_file`] reads just this section from the file, best effort; the full validation
//! later refuses a bad value with its field and line.

use std::path::{Path, PathBuf};

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
    /// The access log: a file path, `"stdout"`, or `""` (off, the default).
    pub access: Option<String>,
    /// `"json"` (default) or `"combined"`.
    pub access_format: Option<String>,
}

/// Where the access log goes.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum AccessTarget {
    /// No access log (`access = ""`, the default).
    #[default]
    Off,
    /// Standard output (`access = "stdout"`), for a container's log collector.
    Stdout,
    /// Appended to this file (its directory is created if missing); `SIGUSR1` reopens it.
    File(PathBuf),
}

/// As written in the file (a reload refusal quotes it to the operator).
impl std::fmt::Debug for AccessTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AccessTarget::Off => f.write_str("\"\""),
            AccessTarget::Stdout => f.write_str("\"stdout\""),
            AccessTarget::File(p) => write!(f, "{:?}", p.display().to_string()),
        }
    }
}

/// How each access log line is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AccessFormat {
    /// One JSON object per line (the default).
    #[default]
    Json,
    /// nginx's `combined` format, the resolved client first (fail2ban, GoAccess, …).
    Combined,
}

/// The validated `[log]` section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogSettings {
    pub format: LogFormat,
    /// `[log] access`: where the access log goes (off by default).
    pub access: AccessTarget,
    /// `[log] access_format`: `json` (default) or `combined`.
    pub access_format: AccessFormat,
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
        let access = match raw.access.as_deref() {
            None | Some("") => AccessTarget::Off,
            Some("stdout") => AccessTarget::Stdout,
            Some(p) if Path::new(p).is_absolute() => AccessTarget::File(PathBuf::from(p)),
            Some(other) => {
                return Err(ConfigError::invalid(
                    "log.access",
                    format!("{other:?}: must be an absolute file path, \"stdout\", or \"\" (off)"),
                ))
            }
        };
        let access_format = match raw.access_format.as_deref() {
            None | Some("json") => AccessFormat::Json,
            Some("combined") => AccessFormat::Combined,
            Some(other) => {
                return Err(ConfigError::invalid(
                    "log.access_format",
                    format!("{other:?}: must be \"json\" or \"combined\""),
                ))
            }
        };
        Ok(LogSettings {
            format,
            access,
            access_format,
        })
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
                ..RawLog::default()
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
    fn access_log_targets_and_formats() {
        let v = |access: Option<&str>, format: Option<&str>| {
            LogSettings::validate(RawLog {
                access: access.map(str::to_string),
                access_format: format.map(str::to_string),
                ..RawLog::default()
            })
        };
        let off = v(None, None).unwrap();
        assert_eq!(
            (off.access, off.access_format),
            (AccessTarget::Off, AccessFormat::Json)
        );
        assert_eq!(v(Some(""), None).unwrap().access, AccessTarget::Off);
        assert_eq!(
            v(Some("stdout"), None).unwrap().access,
            AccessTarget::Stdout
        );
        let file = v(Some("/var/log/limiter/access.log"), Some("combined")).unwrap();
        assert_eq!(
            file.access,
            AccessTarget::File("/var/log/limiter/access.log".into())
        );
        assert_eq!(file.access_format, AccessFormat::Combined);
        let err = v(Some("access.log"), None).unwrap_err().to_string();
        assert!(
            err.contains("log.access") && err.contains("absolute"),
            "{err}"
        );
        let err = v(None, Some("common")).unwrap_err().to_string();
        assert!(err.contains("log.access_format"), "{err}");
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
