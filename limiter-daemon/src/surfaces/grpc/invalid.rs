//! A bad call's answer: `INVALID_ARGUMENT` whose message names the field at fault, as the
//! proto names it (`attributes.source.address`, `descriptors[0].entries[1].value`,
//! `hits_addend`), also given alone in the `x-limiter-field` metadata for programs.

use tonic::metadata::MetadataValue;
use tonic::Status;

/// Metadata key of the field at fault on an `INVALID_ARGUMENT`.
pub const FIELD_METADATA: &str = "x-limiter-field";

/// What is wrong with one field of a call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn into_status(self) -> Status {
        let mut status = Status::invalid_argument(self.to_string());
        // Field paths are ASCII; one that is not is still named in the message.
        if let Ok(v) = MetadataValue::try_from(self.field.as_str()) {
            status.metadata_mut().insert(FIELD_METADATA, v);
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_names_the_field() {
        let s = FieldError::new("descriptors[0].hits_addend", "must be at least 1").into_status();
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert!(
            s.message().contains("`descriptors[0].hits_addend`"),
            "{s:?}"
        );
        assert_eq!(
            s.metadata().get(FIELD_METADATA).unwrap(),
            "descriptors[0].hits_addend"
        );
    }
}
