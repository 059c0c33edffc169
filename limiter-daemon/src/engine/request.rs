//! What the engine needs to know about a request, borrowed from whichever surface has it.

use http::{HeaderMap, Method};

use crate::identity::client_ip::Client;

/// A request to decide on, as every surface describes it.
#[derive(Clone, Copy, Debug)]
pub struct RequestView<'a> {
    /// Who sent it, resolved once where the request came in (the proxy's peer and its
    /// forwarding fields walked, a front end's `X-Real-IP`, the `ip` a caller states): never
    /// walked again.
    pub client: Client,
    pub method: &'a Method,
    /// Path only, without the query string (routes are matched on it).
    pub path: &'a str,
    pub headers: &'a HeaderMap,
}
