//! [`FleetStore`] with leases ([`super::leases`]): a request whose identity holds a live grant
//! is answered here; one that holds none asks the store for a lease (giving back what its
//! expired grant left, in the same round trip), and the answer is settled like any decision.

use std::time::{Duration, Instant};

use super::fleet_store::FleetStore;
use super::leases::{Miss, Spend};
use crate::model::WindowKind;
use crate::store::count::{CountOutcome, CountRequest};
use crate::store::error::StoreError;
use crate::store::gate::Gate;
use crate::store::lease::Unspent;
use crate::store::traits::Counting;

impl FleetStore {
    /// The answer from a grant this host holds, if it holds one; else `miss` says what to ask.
    pub(super) fn lease_answer(
        &self,
        req: &CountRequest,
        miss: &mut Option<Miss>,
    ) -> Option<Result<Gate, StoreError>> {
        let l = self.leases.as_ref()?;
        match l.spend(req) {
            Spend::Local(mut o) => {
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
                Some(Ok(Gate::Counted(o)))
            }
            Spend::Remote { want, back } => {
                *miss = Some(Miss { want, back });
                None
            }
        }
    }

    /// A miss not asked of the store (it is down, or the path takes no lease): what it was to
    /// give back goes to the background task.
    pub(super) fn miss_unasked(&self, miss: &mut Option<Miss>) {
        if let (Some(l), Some(m)) = (&self.leases, miss.take()) {
            if !m.back.is_empty() {
                l.give_back_later(m.back);
            }
        }
    }

    /// Settles a lease's answer: installs the grant when the request is admitted, gives it
    /// back when the settled answer refuses what the store granted.
    pub(super) fn settle_lease(
        &self,
        req: &CountRequest,
        here: Option<CountOutcome>,
        a: Result<(CountOutcome, u32), StoreError>,
    ) -> Result<Gate, StoreError> {
        let Some(l) = &self.leases else {
            return self.settle(req, here, a.map(|(o, _)| Gate::Counted(o)));
        };
        match a {
            Ok((o, g)) => {
                // Refused by the store while a grant another request of this identity brought
                // is held here: that grant answers (the store counted it; refusing would
                // under-admit on one host).
                if g == 0 {
                    if let Spend::Local(o) = l.spend(req) {
                        return Ok(Gate::Counted(o));
                    }
                }
                let gate = self.settle(req, here, Ok(Gate::Counted(o)));
                match &gate {
                    Ok(Gate::Counted(s)) if s.admitted => l.install(req, &o, g),
                    _ => {
                        if g > 0 {
                            let holders = std::iter::once((req.id, req.limits))
                                .chain(req.networks.iter().flatten().map(|n| (n.id, n.limits)));
                            l.give_back_later(
                                holders
                                    .map(|(id, lim)| Unspent::one(id, req, lim, g - 1, g))
                                    .collect(),
                            );
                        }
                        l.install(req, &o, 0);
                    }
                }
                gate
            }
            Err(e) => self.settle(req, here, Err(e)),
        }
    }

    /// The awaited lease call of the request path, under `decision_timeout`.
    pub(super) fn lease_pending(
        &self,
        req: CountRequest,
        here: Option<CountOutcome>,
        m: Miss,
    ) -> Counting<'_> {
        let deadline = self.settings.decision_timeout;
        Counting::Pending(Box::pin(async move {
            let call = self.remote.lease_async(req, m.want, false, m.back);
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
            self.settle_lease(&req, here, a)
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
