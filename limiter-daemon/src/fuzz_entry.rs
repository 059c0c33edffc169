//! Exists only for the cargo-fuzz targets in `fuzz/` (built with the `fuzzing` feature; the
//! daemon never uses it): thin wrappers around the proxy's own-loop parsers, which stay private
//! to the HTTP rooms ([`crate::edge`], [`crate::proxy`]). The other network-facing parsers the targets drive are public already
//! ([`crate::edge::h1::chunked`], [`crate::surfaces::api::decide_body::parse`],
//! [`crate::identity::IdentityResolver::resolve`], [`crate::config::Config::from_toml_str`]).
//!
//! The wrappers translate the internal results into plain values and add no logic, so what a
//! target checks is what the daemon runs.

use std::net::IpAddr;

use bytes::BytesMut;
use http::{HeaderMap, Method};

use crate::edge::h1::framing::Framing;
use crate::edge::limits::HeaderLimits;
use crate::engine::decider::Decider;
use crate::model::Decision;
use crate::proxy::forward;
use crate::proxy::inspect::{self, Inspected, Scope};

/// What the own loop made of the bytes at the front of a client connection.
#[derive(Debug)]
pub enum RequestHead {
    /// More bytes are needed.
    Partial,
    /// Not a request the loop serves: hyper's server gets the connection.
    HandOver,
    /// Answered with this status, then closed.
    Refused(u16),
    /// Served: the head to send upstream was written to `up`.
    Served(Served),
}

/// A request head the own loop serves.
#[derive(Debug)]
pub struct Served {
    /// Bytes of the client's head (what follows belongs to the next request).
    pub len: usize,
    pub method: Method,
    /// The target's path, without the query, as the decision sees it.
    pub path: String,
    /// The client asked for `Connection: close`.
    pub close: bool,
    /// The fields handed to the decision.
    pub fields: HeaderMap,
}

/// `inspect::inspect` on `wire`; for a served head, the upstream head is written into `up`.
pub fn inspect(
    wire: &[u8],
    limits: HeaderLimits,
    decider: &dyn Decider,
    peer: IpAddr,
    up: &mut Vec<u8>,
) -> RequestHead {
    let scope = Scope {
        limits,
        decider,
        peer,
    };
    match inspect::inspect(wire, &scope, up) {
        Inspected::Partial => RequestHead::Partial,
        Inspected::HandOver => RequestHead::HandOver,
        Inspected::Refuse(resp) => RequestHead::Refused(resp.status().as_u16()),
        Inspected::Serve(plan) => RequestHead::Served(Served {
            len: plan.len,
            method: plan.method.clone(),
            path: plan.path(wire).to_string(),
            close: plan.close,
            fields: plan.fields,
        }),
    }
}

/// How the body after a rewritten response head is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    /// No body (HEAD, 204, 304).
    None,
    /// `Content-Length` bytes.
    Length(u64),
    /// Chunked from the upstream (re-chunked to the client).
    Chunked,
    /// Until the upstream closes (chunked to the client).
    UntilClose,
}

/// What `forward::response_head` decided about the body and the upstream connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseFraming {
    pub body: BodyKind,
    /// Whether the upstream connection may carry another exchange after the body.
    pub keep_alive: bool,
}

/// `forward::response_head`: takes the upstream's final head off `ubuf` (skipping interim 1xx
/// heads) and writes the client's head into `out`. `Ok(None)`: more bytes are needed. `Err`:
/// the upstream's head is refused (the daemon answers 502), with the reason.
pub fn response_head(
    ubuf: &mut BytesMut,
    head_only: bool,
    decision: &Decision,
    close: bool,
    out: &mut Vec<u8>,
) -> Result<Option<ResponseFraming>, String> {
    match forward::response_head(ubuf, head_only, decision, close, out) {
        Ok(None) => Ok(None),
        Ok(Some((framing, keep_alive))) => Ok(Some(ResponseFraming {
            body: match framing {
                None => BodyKind::None,
                Some(Framing::Length(n)) => BodyKind::Length(n),
                Some(Framing::Chunked(_)) => BodyKind::Chunked,
                Some(Framing::UntilClose) => BodyKind::UntilClose,
            },
            keep_alive,
        })),
        Err(err) => Err(err.to_string()),
    }
}
