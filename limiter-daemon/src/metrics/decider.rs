//! [`MeteredDecider`]: wraps the engine where all three HTTP surfaces (reverse proxy,
//! `/v1/decide`, `/v1/auth`) ask for decisions, so each decision is counted exactly once
//! whatever surface renders it, and the surfaces themselves know nothing about metrics.

use std::sync::Arc;
use std::time::Instant;

use super::Metrics;
use crate::engine::decider::{Decider, RequestView};
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

impl Decider for MeteredDecider {
    fn decide(&self, req: &RequestView<'_>) -> Decision {
        let started = Instant::now();
        let d = self.inner.decide(req);
        self.metrics
            .decisions
            .observe_decide_time(started.elapsed());
        self.metrics.decisions.observe(&d);
        self.metrics.talkers.observe(&d);
        d
    }

    fn reads_header(&self, name: &[u8]) -> bool {
        self.inner.reads_header(name)
    }

    /// Not a decision: not observed.
    fn standing(&self, req: &RequestView<'_>) -> Option<Standing> {
        self.inner.standing(req)
    }
}
