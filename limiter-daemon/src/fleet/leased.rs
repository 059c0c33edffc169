//! [`FleetStore`] with leases ([`super::leases`]): a request each of whose holders (the caller,
//! its networks) holds a live grant is answered here; otherwise the holders that hold none ask
//! the store for a lease (giving back what expired grants left, in the same round trip), and
//! the answer is settled like any decision.

use std::time::{Duration, Instant};

use super::fleet_store::FleetStore;
use super::leases::{Miss, Spend};
use crate::model::WindowKind;
use crate::store::count::{CountOutcome, CountRequest};
use crate::store::error::StoreError;
use crate::store::gate::Gate;
use crate::store::lease::Grants;
use crate::store::traits::Counting;

impl FleetStore {
    /// The answer from grants this host holds, if each of the request's holders holds one;
    /// else `miss` says what to ask.
    pub(super) fn lease_answer(
        &self,
        req: &CountRequest,
        miss: &mut Option<Miss>,
    ) -> Option<Result<Gate, StoreError>> {
        let l = self.leases.as_ref()?;
        match l.spend(req) {
            Spend::Local(mut o, taken) => {
                // This host's own burst copy sees every request, also those a held refusal
                // answered here, which the store's count lacks: the larger count answers, as
                // in `settle`.
                if let Some(b) = self.count_local_burst(req) {
                    let k = WindowKind::Burst;
                    if b.uses[k].map(|w| w.used) > o.uses[k].map(|w| w.used) {
                        o.uses[k] = b.uses[k];
                        if b.refused[k] {
                            o.refused[k] = true;
                            o.admitted = false;
                        }
                    }
                }
                if !o.admitted {
                    // Refused by this host's burst: the units taken go back but the arrival.
                    l.refused(&taken, &[None; crate::store::lease::HOLDERS]);
                }
                Some(Ok(Gate::Counted(o)))
            }
            Spend::Remote(m) => {
                *miss = Some(m);
                None
            }
        }
    }

    /// A miss not asked of the store (it is down, or the path takes no lease): what it took
    /// and what it was to give back go to the background task.
    pub(super) fn miss_unasked(&self, miss: &mut Option<Miss>) {
        if let (Some(l), Some(m)) = (&self.leases, miss.take()) {
            l.failed(m);
        }
    }

    /// Settles the store's answer to a miss: installs the grants when the request is
    /// admitted, gives back what it took and was granted when the settled answer refuses.
    pub(super) fn settle_lease(
        &self,
        req: &CountRequest,
        here: Option<CountOutcome>,
        m: Miss,
        a: Result<Grants, StoreError>,
    ) -> Result<Gate, StoreError> {
        let Some(l) = &self.leases else {
            return self.settle(req, here, Err(StoreError::Open));
        };
        match a {
            Ok(grants) => {
                let o = l.outcome(req, &m, &grants);
                let gate = self.settle(req, here, Ok(Gate::Counted(o)));
                match &gate {
                    Ok(Gate::Counted(s)) if s.admitted => l.admitted(&m, &grants),
                    _ => l.refused(&m, &grants),
                }
                gate
            }
            Err(e) => {
                l.failed(m);
                self.settle(req, here, Err(e))
            }
        }
    }

    /// The awaited lease call of the request path, under `decision_timeout`.
    pub(super) fn lease_pending(
        &self,
        req: CountRequest,
        here: Option<CountOutcome>,
        mut m: Miss,
    ) -> Counting<'_> {
        let deadline = self.settings.decision_timeout;
        Counting::Pending(Box::pin(async move {
            let back = std::mem::take(&mut m.back);
            let call = self.remote.lease_async(m.asks, false, back);
            let a = match tokio::time::timeout(deadline, call).await {
                Ok(a) => a,
                Err(_) => {
                    self.stats
                        .timeouts
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Err(StoreError::Valkey {
                        op: "check_and_count",
                        message: format!("no answer within decision_timeout ({deadline:?})"),
                    })
                }
            };
            let a = match a {
                Ok(mut grants) => {
                    if let Some(l) = self.leases.as_ref().filter(|l| l.any_refused(&m, &grants)) {
                        let waits = l.refill_waits(&m, &grants);
                        if waits {
                            l.wait_refills_async(&m, &grants, deadline).await;
                        }
                        let back = l.rescue(&mut m, &mut grants);
                        let retry = l.retry(&m, &grants);
                        // A refill that landed meanwhile may be past its slot already: its
                        // units go back in the retry's round trip, ahead of the ask.
                        if (waits || !back.is_empty()) && retry.iter().any(Option::is_some) {
                            let call = self.remote.lease_async(retry, true, back);
                            if let Ok(Ok(again)) = tokio::time::timeout(deadline, call).await {
                                l.retried(&mut grants, &retry, &again);
                            }
                        } else {
                            l.settle_rescue(back);
                        }
                    }
                    Ok(grants)
                }
                Err(e) => Err(e),
            };
            self.settle_lease(&req, here, m, a)
        }))
    }

    /// Gives back every grant held (the host stops) and waits until `deadline` for it.
    pub(super) fn surrender_leases(&self, deadline: Instant) -> bool {
        let Some(l) = &self.leases else { return true };
        l.surrender();
        while l.pending() > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::park_timeout(Duration::from_millis(2));
        }
        true
    }

    /// This host's leases (tests, the bench).
    pub fn leases(&self) -> Option<&super::leases::Leases> {
        self.leases.as_deref()
    }
}
