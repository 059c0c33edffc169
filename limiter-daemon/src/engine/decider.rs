//! The one thing every HTTP surface needs from the engine: a [`Decision`] for a request.
//!
//! Surfaces are written against [`Decider`] so their mechanics (streaming, holding, rendering)
//! can be tested with a scripted decider; the daemon plugs in the real engine.

use std::net::IpAddr;
use std::num::NonZeroU32;

use http::HeaderMap;

use crate::engine::base::Engine;
pub use crate::engine::decided::Decided;
pub use crate::engine::request::RequestView;
use crate::engine::standing::Standing;
use crate::identity::client_ip::Client;
use crate::model::Decision;

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

    /// The caller as its next decision would name it (tier, identity, upgrade sentence,
    /// hourly budget), nothing counted and no verdict: what the overload ladder sheds by. The
    /// default: an anonymous caller.
    fn caller(&self, _req: &RequestView<'_>) -> Decision {
        Decision::new(crate::model::Tier::Anon, "", None)
    }

    /// Who sent a request arriving from `peer` with `headers`: a trusted proxy's forwarding
    /// field walked with the engine's trust rules (`[identity]`), once, where the request came
    /// in. The default: the peer itself.
    fn resolve(&self, peer: IpAddr, _headers: &HeaderMap) -> Client {
        Client::Addr(peer)
    }

    /// Strikes the caller at `peer` for protocol abuse `why` (an HTTP/2 connection closed for
    /// rapid reset or a frame flood), as a burst would. May touch the store: call it off the
    /// request threads. The default strikes no one.
    fn abuse_strike(&self, _peer: IpAddr, _why: &str) {}
}

/// The real engine.
impl Decider for Engine {
    fn decide(&self, req: &RequestView<'_>) -> Decision {
        Engine::decide(self, req)
    }

    fn decide_async<'a>(&'a self, req: &RequestView<'_>) -> Decided<'a> {
        Engine::decide_async(self, req)
    }

    fn decide_async_costing<'a>(&'a self, req: &RequestView<'_>, cost: NonZeroU32) -> Decided<'a> {
        Engine::decide_async_costing(self, req, Some(cost))
    }

    fn reads_header(&self, name: &[u8]) -> bool {
        self.with_runtime(|rt| crate::identity::reads_header(&rt.cfg, name))
    }

    fn standing(&self, req: &RequestView<'_>) -> Option<Standing> {
        Some(Engine::standing(self, req))
    }

    fn abuse_strike(&self, peer: IpAddr, why: &str) {
        Engine::abuse_strike(self, peer, why);
    }

    fn caller(&self, req: &RequestView<'_>) -> Decision {
        Engine::caller(self, req)
    }

    fn resolve(&self, peer: IpAddr, headers: &HeaderMap) -> Client {
        self.with_runtime(|rt| crate::identity::client_ip::client(peer, headers, &rt.cfg.identity))
    }
}
