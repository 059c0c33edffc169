//! TLS termination on the proxy's `tls_listen` listeners (rustls, TLS 1.2 and 1.3). The
//! certificate is chosen by SNI among the `[[http.tls]]` entries: the first whose certificate
//! is valid for the name the client asked for, else the first entry. [`TlsCerts::replace`]
//! swaps the set on a reload (files already checked by the config); connections open keep the
//! certificate they were made with. [`serve`] is the accept side.

mod certs;
pub mod serve;

pub use certs::TlsCerts;
