//! Refusals that race this host's own lease traffic ([`Leases`]): the store refused a holder
//! while a refill of it was in flight, or while give-backs were on their way. On one host one
//! script per decision would have admitted the request, so it waits for them to land, takes
//! its unit from the refill, or asks once more.

use std::time::Duration;

use super::leases::{Leases, Miss};
use crate::store::count::CountRequest;
use crate::store::lease::{Asks, Grants, Unspent, HOLDERS};

impl Leases {
    pub(super) fn refills_landed(&self) {
        *self.landed.lock() += 1;
        self.landed_cv.notify_all();
        self.landed_async.notify_waiters();
    }

    /// Whether a holder the store refused in `grants` has a refill in flight here: the refill
    /// took what the store had left, and this host will spend it. On one host the request is
    /// then answered from the refill once it lands, as one script per decision would have
    /// admitted it, rather than refused while the units sit in flight.
    /// Also while give-backs of a refused holder are on their way: the store refused what it
    /// will hold again when they land (then asked once more, [`Leases::retry`]). Only its
    /// own: other holders' give-backs free nothing it was refused.
    pub fn refill_waits(&self, miss: &Miss, grants: &Grants) -> bool {
        self.refused_holders(miss, grants)
            .any(|h| self.refilling(h) || self.returning(&h.id))
    }

    /// Whether the store refused a holder of `miss`.
    pub fn any_refused(&self, miss: &Miss, grants: &Grants) -> bool {
        self.refused_holders(miss, grants).next().is_some()
    }

    /// After [`Leases::rescue`]: the holders still refused, each asked once more for one
    /// request (as a refill: a refusal counts nothing again).
    pub fn retry(&self, miss: &Miss, grants: &Grants) -> Asks {
        let mut asks: Asks = [None; HOLDERS];
        for (i, a) in asks.iter_mut().enumerate() {
            if let (Some((h, _)), Some((_, 0))) = (miss.asks[i], grants[i]) {
                *a = Some((h, 1));
            }
        }
        asks
    }

    /// The answers to [`Leases::retry`] replace the refusals they admit; each such holder
    /// gives back the burst arrival its first refusal counted (the grant counts it again).
    pub fn retried(&self, grants: &mut Grants, asked: &Asks, again: &Grants) {
        let mut back = Vec::new();
        for i in 0..HOLDERS {
            if let (Some((h, _)), Some((o, g))) = (asked[i], again[i]) {
                if g > 0 {
                    grants[i] = Some((o, g));
                    back.push(Unspent::one(h.id, &h, h.limits, 1, 0));
                }
            }
        }
        if !back.is_empty() {
            self.give_back_later(back);
        }
    }

    fn refused_holders<'a>(
        &'a self,
        miss: &'a Miss,
        grants: &'a Grants,
    ) -> impl Iterator<Item = &'a CountRequest> + 'a {
        miss.asks
            .iter()
            .zip(grants)
            .filter_map(|(a, g)| match (a, g) {
                (Some((h, _)), Some((_, 0))) => Some(h),
                _ => None,
            })
    }

    fn refilling(&self, h: &CountRequest) -> bool {
        self.shard(&h.id)
            .lock()
            .get(&h.id)
            .is_some_and(|held| held.refilling)
    }

    /// Waits (the synchronous path) until no refused holder of `miss` is refilling, or
    /// `deadline`.
    pub fn wait_refills(&self, miss: &Miss, grants: &Grants, deadline: std::time::Instant) {
        let mut landed = self.landed.lock();
        while self.refill_waits(miss, grants) {
            if self.landed_cv.wait_until(&mut landed, deadline).timed_out() {
                return;
            }
        }
    }

    /// [`Leases::wait_refills`] for the awaited path.
    pub async fn wait_refills_async(&self, miss: &Miss, grants: &Grants, deadline: Duration) {
        let until = tokio::time::Instant::now() + deadline;
        loop {
            let landed = self.landed_async.notified();
            tokio::pin!(landed);
            landed.as_mut().enable();
            if !self.refill_waits(miss, grants) {
                return;
            }
            if tokio::time::timeout_at(until, landed).await.is_err() {
                return;
            }
        }
    }

    /// Whether refills or give-backs are queued or in flight.
    pub(super) fn busy(&self) -> bool {
        self.pending() > 0
            || !self.refills.lock().is_empty()
            || self
                .shards
                .iter()
                .any(|s| s.lock().values().any(|h| h.refilling))
    }

    /// Waits until no refill or give-back is queued or in flight, or `deadline`; `true`
    /// when none is ([`crate::store::traits::RecordStore::settle`]).
    pub fn wait_idle(&self, deadline: std::time::Instant) -> bool {
        let mut landed = self.landed.lock();
        while self.busy() {
            if self.landed_cv.wait_until(&mut landed, deadline).timed_out() {
                return !self.busy();
            }
        }
        true
    }

    /// After [`Leases::wait_refills`]: each refused holder takes its unit from the refill
    /// that landed, if there is one, and is no longer refused. Returns what the holders' grants
    /// left expired (a refill stamped with its request's time can land already past its slot):
    /// the caller gives it back **before** asking again ([`Leases::settle_rescue`]), or the
    /// store would refuse the retry for units this host holds and cannot spend.
    pub fn rescue(&self, miss: &mut Miss, grants: &mut Grants) -> Vec<Unspent> {
        let mut back = Vec::new();
        for (i, grant) in grants.iter_mut().enumerate() {
            let (Some((h, want)), Some((_, 0))) = (miss.asks[i], *grant) else {
                continue;
            };
            let got = self.take_held(&h, &mut back);
            if let Some(o) = got {
                self.ask_failed(&h, want);
                miss.taken[i] = Some(o);
                miss.asks[i] = None;
                *grant = None;
            }
        }
        back
    }

    /// What [`Leases::rescue`] left to give back, when no retry carries it in its round trip.
    pub fn settle_rescue(&self, back: Vec<Unspent>) {
        if !back.is_empty() {
            self.give_back_later(back);
        }
    }
}
