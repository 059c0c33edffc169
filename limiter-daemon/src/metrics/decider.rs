//! [`MeteredDecider`]: wraps the engine where all three HTTP surfaces (reverse proxy,
//! `/v1/decide`, `/v1/auth`) ask for decisions, so each decision is counted exactly once
//! whatever surface renders it, and the surfaces themselves know nothing about metrics.

use std::sync::Arc;
use std::time::Instant;

use super::Metrics;
use crate::engine::decider::{Decided, Decider, RequestView};
use crate::engine::standing::Standing;
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
    fn observe(&self, started: Instant, d: &Decision) {
        self.metrics
            .decisions
            .observe_decide_time(started.elapsed());
        self.metrics.decisions.observe(d);
        self.metrics.talkers.observe(d);
    }
}

impl Decider for MeteredDecider {
    fn decide(&self, req: &RequestView<'_>) -> Decision {
        let started = Instant::now();
        let d = self.inner.decide(req);
        self.observe(started, &d);
        d
    }

    /// Timed from the call to the answer, the remote store's wait included.
    fn decide_async<'a>(&'a self, req: &RequestView<'_>) -> Decided<'a> {
        let started = Instant::now();
        match self.inner.decide_async(req) {
            Decided::Ready(d) => {
                self.observe(started, &d);
                Decided::Ready(d)
            }
            Decided::Pending(f) => Decided::Pending(Box::pin(async move {
                let d = f.await;
                self.observe(started, &d);
                d
            })),
        }
    }

    fn reads_header(&self, name: &[u8]) -> bool {
        self.inner.reads_header(name)
    }

    /// Not a decision: not observed.
    fn standing(&self, req: &RequestView<'_>) -> Option<Standing> {
        self.inner.standing(req)
    }
}
