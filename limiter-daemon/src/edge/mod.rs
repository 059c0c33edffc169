//! The listener runtime, and the floor every HTTP surface stands on: the proxy
//! ([`crate::proxy`]) and the decision surfaces ([`crate::surfaces`]) import from here and never
//! from each other's rooms.
//!
//! - [`listen`]: accepting (the one accept loop, connection caps, the descriptor budget), the
//!   PROXY protocol, and serving a router with head, idle and body timeouts.
//! - [`steps`]: a request's steps, written once: resolve the client, decide, admit or hold,
//!   shed, render, log.
//! - [`limits`]: the request-head bounds every surface applies.
//! - [`overload`]: the ladder under overload: slots at the upstream, the adaptive limit, which
//!   tier is shed first (the proxy sheds through [`steps`]).
//! - [`h1`]: HTTP/1 wire code on bytes: chunked decoding, message framing, hop-by-hop hygiene.
//! - [`render`]: how a decision becomes rate-limit fields and a 429, and every error body as
//!   `application/problem+json` (or a page, for a browser).
//! - [`access_log`]: one line per request answered, from every surface.

pub mod access_log;
pub mod h1;
pub mod limits;
pub mod listen;
pub mod overload;
pub mod render;
pub mod steps;
