//! What the engine needs to know about a request, borrowed from whichever HTTP surface has it.

use std::net::IpAddr;

/// A request to decide on. `peer` is the TCP peer; forwarding headers are only believed when
/// it is a trusted proxy.
#[derive(Clone, Copy, Debug)]
pub struct RequestInfo<'a> {
    pub peer: IpAddr,
    pub method: &'a str,
    /// Path (a query string is ignored for route matching).
    pub path: &'a str,
    pub headers: &'a http::HeaderMap,
    /// `peer` is a trusted proxy whose forwarding field named no usable client, found by a
    /// surface that resolves the client itself (`/v1/auth`); the proxy path leaves it `false`
    /// and the engine walks the headers.
    pub unattributed: bool,
}
