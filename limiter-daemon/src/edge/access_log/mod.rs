//! The access log: one line per request answered, on every surface (the proxy over HTTP/1.1,
//! HTTP/2 and TLS, `/v1/decide`, `/v1/auth`, Envoy's gRPC services), written as JSON or as
//! nginx's `combined` format (`[log] access`, `access_format`).
//!
//! - [`record`]: what one line says ([`Record`]), filled by the surface that answered.
//! - [`handle`]: [`AccessLog`], the cheap handle each surface calls once per request; it never
//!   waits: a line the writer cannot take at once is dropped and counted.
//! - [`writer`]: the thread that formats and writes lines, and reopens the file on `SIGUSR1`.
//! - [`format`]: the two line formats.
//! - [`body`]: a response body that counts the bytes sent and records the line at its end.

pub mod body;
pub mod format;
pub mod handle;
pub mod record;
pub mod writer;

pub use handle::AccessLog;
pub use record::{Record, Surface, Verdict};
