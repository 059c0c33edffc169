//! The configuration error: always names the field (and the line when the parser knows it).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The text does not deserialize: TOML syntax, a value of the wrong type, an unknown key.
    /// `field` is the dotted path the parser had reached (`None` for a syntax error).
    #[error(
        "config file {path}{}: {}{message}",
        line.map(|l| format!(", line {l}")).unwrap_or_default(),
        field.as_ref().map(|f| format!("field `{f}`: ")).unwrap_or_default()
    )]
    Parse {
        path: PathBuf,
        line: Option<usize>,
        field: Option<String>,
        message: String,
    },
    #[error("config field `{field}`: {message}")]
    Invalid { field: String, message: String },
    /// A validation error located in the file (the line where the field is written).
    #[error("config file {path}, line {line}: field `{field}`: {message}")]
    InvalidAt {
        path: PathBuf,
        line: usize,
        field: String,
        message: String,
    },
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
}

impl ConfigError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}
