//! The one thing every HTTP surface needs from the engine: a [`Decision`] for a request.
//!
//! Surfaces are written against [`Decider`] so their mechanics (streaming, holding, rendering)
//! can be tested with a scripted decider; the daemon plugs in the real engine.

use std::net::IpAddr;
use std::num::NonZeroU32;

use http::{HeaderMap, Method};

use crate::engine::base::Engine;
pub use crate::engine::decided::Decided;
use crate::engine::request::RequestInfo;
use crate::engine::standing::Standing;
use crate::model::Decision;

/// What a surface knows about a request when it asks for a decision.
#[derive(Clone, Copy, Debug)]
pub struct RequestView<'a> {
    /// Who is asking: the TCP peer for the proxy (the engine may walk `X-Forwarded-For` when the
    /// peer is a trusted proxy), or the resolved client for `/v1/auth` and `/v1/decide`.
    pub peer: IpAddr,
    pub method: &'a Method,
    /// Path only, without the query string (routes are matched on it).
    pub path: &'a str,
    pub headers: &'a HeaderMap,
    /// `peer` is a trusted proxy that named no usable client (see [`RequestInfo`]).
    pub unattributed: bool,
}

/// Decides one request. Implementations must be cheap and must not block for long: surfaces
/// call this on the request path.
pub trait Decider: Send + Sync + 'static {
    /// The decision, blocking on a remote store if there is one (admin, tests, benches).
    fn decide(&self, req: &RequestView<'_>) -> Decision;

    /// The decision without blocking the thread: what every surface calls. The default
    /// answers in place.
    fn decide_async<'a>(&'a self, req: &RequestView<'_>) -> Decided<'a> {
        Decided::Ready(self.decide(req))
    }

    /// [`Decider::decide_async`] at `cost` units instead of the route's: a front end that
    /// states the cost itself (Envoy's `hits_addend`). The default, for deciders that do not
    /// count units (scripted ones in tests), answers as `decide_async`.
    fn decide_async_costing<'a>(&'a self, req: &RequestView<'_>, cost: NonZeroU32) -> Decided<'a> {
        let _ = cost;
        self.decide_async(req)
    }

    /// Whether a decision may depend on the request field `name` (any case). A surface that
    /// parses heads itself builds the view's map from these fields alone; the default, every
    /// field, is always correct.
    fn reads_header(&self, _name: &[u8]) -> bool {
        true
    }

    /// The caller's standing without counting anything (the proxy's self-service endpoint).
    /// `None`, the default: this decider cannot tell, and the endpoint is not answered.
    fn standing(&self, _req: &RequestView<'_>) -> Option<Standing> {
        None
    }

    /// The client behind `peer` as the engine resolves it (a trusted proxy's forwarding field
    /// walked), for the access log. The default: the peer itself.
    fn client(&self, peer: IpAddr, _headers: &HeaderMap) -> IpAddr {
        peer
    }

    /// Strikes the caller at `peer` for protocol abuse `why` (an HTTP/2 connection closed for
    /// rapid reset or a frame flood), as a burst would. May touch the store: call it off the
    /// request threads. The default strikes no one.
    fn abuse_strike(&self, _peer: IpAddr, _why: &str) {}
}

impl<D: Decider + ?Sized> Decider for std::sync::Arc<D> {
    fn decide(&self, req: &RequestView<'_>) -> Decision {
        (**self).decide(req)
    }

    fn decide_async<'a>(&'a self, req: &RequestView<'_>) -> Decided<'a> {
        (**self).decide_async(req)
    }

    fn decide_async_costing<'a>(&'a self, req: &RequestView<'_>, cost: NonZeroU32) -> Decided<'a> {
        (**self).decide_async_costing(req, cost)
    }

    fn reads_header(&self, name: &[u8]) -> bool {
        (**self).reads_header(name)
    }

    fn standing(&self, req: &RequestView<'_>) -> Option<Standing> {
        (**self).standing(req)
    }

    fn abuse_strike(&self, peer: IpAddr, why: &str) {
        (**self).abuse_strike(peer, why);
    }

    fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        (**self).client(peer, headers)
    }
}

/// The real engine: the surfaces' view maps onto its [`RequestInfo`] one to one.
impl Decider for Engine {
    fn decide(&self, req: &RequestView<'_>) -> Decision {
        Engine::decide(self, &info(req))
    }

    fn decide_async<'a>(&'a self, req: &RequestView<'_>) -> Decided<'a> {
        Engine::decide_async(self, &info(req))
    }

    fn decide_async_costing<'a>(&'a self, req: &RequestView<'_>, cost: NonZeroU32) -> Decided<'a> {
        Engine::decide_async_costing(self, &info(req), Some(cost))
    }

    fn reads_header(&self, name: &[u8]) -> bool {
        self.with_runtime(|rt| crate::identity::reads_header(&rt.cfg, name))
    }

    fn standing(&self, req: &RequestView<'_>) -> Option<Standing> {
        Some(Engine::standing(self, &info(req)))
    }

    fn abuse_strike(&self, peer: IpAddr, why: &str) {
        Engine::abuse_strike(self, peer, why);
    }

    fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        self.with_runtime(|rt| {
            crate::identity::client_ip::client_ip(peer, headers, &rt.cfg.identity)
        })
    }
}

/// The surfaces' view as the engine's request: the same fields, borrowed.
fn info<'a>(req: &'a RequestView<'a>) -> RequestInfo<'a> {
    RequestInfo {
        peer: req.peer,
        method: req.method.as_str(),
        path: req.path,
        headers: req.headers,
        unattributed: req.unattributed,
    }
}
