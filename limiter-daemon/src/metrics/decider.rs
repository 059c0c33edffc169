//! [`MeteredDecider`]: wraps the engine where all three HTTP surfaces (reverse proxy,
//! `/v1/decide`, `/v1/auth`, Envoy's gRPC services) ask for decisions, so each decision is counted exactly once
//! whatever surface renders it, and the surfaces themselves know nothing about metrics.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Instant;

use super::Metrics;
use crate::engine::decider::{Decided, Decider, RequestView};
use crate::engine::standing::Standing;
use crate::identity::client_ip::{normalize, Client};
use crate::model::Decision;

pub struct MeteredDecider {
    inner: Arc<dyn Decider>,
    metrics: Arc<Metrics>,
}

impl MeteredDecider {
    pub fn new(inner: Arc<dyn Decider>, metrics: Arc<Metrics>) -> Self {
        MeteredDecider { inner, metrics }
    }
}

impl MeteredDecider {
    fn observe(&self, started: Instant, d: &Decision, addr: IpAddr) {
        self.metrics
            .decisions
            .observe_decide_time(started.elapsed());
        self.metrics.decisions.observe(d);
        self.metrics.talkers.observe(d, addr);
    }

    /// The client's address as the engine meters it, for the talker table: only an anonymous
    /// caller's is kept.
    fn address(req: &RequestView<'_>) -> IpAddr {
        normalize(req.client.ip())
    }
}

impl Decider for MeteredDecider {
    fn decide(&self, req: &RequestView<'_>) -> Decision {
        let started = Instant::now();
        let d = self.inner.decide(req);
        self.observe(started, &d, Self::address(req));
        d
    }

    /// Timed from the call to the answer, the remote store's wait included.
    fn decide_async<'a>(&'a self, req: &RequestView<'_>) -> Decided<'a> {
        let started = Instant::now();
        let addr = Self::address(req);
        self.observed(started, addr, self.inner.decide_async(req))
    }

    fn decide_async_costing<'a>(&'a self, req: &RequestView<'_>, cost: NonZeroU32) -> Decided<'a> {
        let started = Instant::now();
        let addr = Self::address(req);
        self.observed(started, addr, self.inner.decide_async_costing(req, cost))
    }

    fn reads_header(&self, name: &[u8]) -> bool {
        self.inner.reads_header(name)
    }

    /// Not a decision: not observed.
    fn standing(&self, req: &RequestView<'_>) -> Option<Standing> {
        self.inner.standing(req)
    }

    fn abuse_strike(&self, peer: IpAddr, why: &str) {
        self.inner.abuse_strike(peer, why);
    }

    /// Not a decision: not observed (sheds are counted by the overload ladder).
    fn caller(&self, req: &RequestView<'_>) -> Decision {
        self.inner.caller(req)
    }

    fn resolve(&self, peer: IpAddr, headers: &http::HeaderMap) -> Client {
        self.inner.resolve(peer, headers)
    }
}

impl MeteredDecider {
    /// `decided`, observed once it is known.
    fn observed<'a>(&'a self, started: Instant, addr: IpAddr, decided: Decided<'a>) -> Decided<'a> {
        match decided {
            Decided::Ready(d) => {
                self.observe(started, &d, addr);
                Decided::Ready(d)
            }
            Decided::Pending(f) => Decided::Pending(Box::pin(async move {
                let d = f.await;
                self.observe(started, &d, addr);
                d
            })),
        }
    }
}
