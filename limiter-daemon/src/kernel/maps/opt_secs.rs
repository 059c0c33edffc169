//! Serde `with` module for the `remaining` of the views read back from the kernel: a
//! `Option<Duration>` written as fractional seconds, or `null` for none.

use std::time::Duration;

pub fn serialize<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&d.as_secs_f64()),
        None => s.serialize_none(),
    }
}
