//! The ladder under overload (`[overload]`): how many requests the proxy has at the upstream,
//! the limit on them (fixed, or learned by [`gradient`]), and which tier may take the next
//! one. A tier may fill its share of the limit together with the tiers shed before it
//! (anonymous 0.6, …, sponsor 1.0; counted in whole requests, this one included): past it,
//! its request is shed at once with a 503, before the engine decides on it, so a shed spends
//! no budget and earns no strike.
//!
//! The proxy calls [`Overload::try_admit`] once per request, before the decision; the
//! [`Slot`] it returns is held until the upstream has answered, and its drop releases the slot
//! and (once [`Slot::start`] marked it sent) feeds the latency to the adaptive limit.

pub mod gradient;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rand::Rng as _;

use crate::config::overload::{InflightLimit, OverloadSettings};
use crate::model::{Decision, Reason, Tier};
use gradient::Gradient;

/// Requests in flight to the upstream through the proxy, and the limit on them.
#[derive(Debug)]
pub struct Overload {
    settings: OverloadSettings,
    /// The smallest share: below it no tier is shed, and the caller's tier is not looked up.
    least_share: f64,
    inflight: AtomicU32,
    limit: AtomicU32,
    /// `"auto"` only.
    gradient: Option<Mutex<Gradient>>,
    sheds: [AtomicU64; Tier::ALL.len()],
    epoch: Instant,
}

impl Overload {
    /// `None` when `[overload] enabled` is false.
    pub fn new(settings: &OverloadSettings) -> Option<Arc<Overload>> {
        if !settings.enabled {
            return None;
        }
        let (limit, gradient) = match settings.limit {
            InflightLimit::Fixed(n) => (n, None),
            InflightLimit::Auto { min, max } => (min, Some(Mutex::new(Gradient::new(min, max, 0)))),
        };
        Some(Arc::new(Overload {
            least_share: settings.shares.iter().copied().fold(1.0, f64::min),
            settings: settings.clone(),
            inflight: AtomicU32::new(0),
            limit: AtomicU32::new(limit),
            gradient,
            sheds: Default::default(),
            epoch: Instant::now(),
        }))
    }

    /// Takes a slot for a request on `path`, unless its caller's tier is past its share. `who`
    /// names the caller (tier and upgrade sentence, nothing counted); it is asked only when
    /// some tier could be shed. `Err`: the shed, as a decision to render.
    pub fn try_admit(
        self: &Arc<Self>,
        path: &str,
        who: impl FnOnce() -> Decision,
    ) -> Result<Slot, Box<Decision>> {
        let never = self.settings.never_sheds(path);
        let mut who = Some(who);
        let mut caller: Option<Decision> = None;
        let mut current = self.inflight.load(Ordering::Acquire);
        loop {
            // A tier may fill its share: with this request, no more than `share × limit` in
            // flight (so a sponsor is refused only at the limit, and the tiers below always
            // leave it a slot). The epsilon keeps `0.6 × 10` at 6.
            let limit = f64::from(self.limit.load(Ordering::Relaxed)) + 1e-9;
            let after = f64::from(current) + 1.0;
            if !never && after > self.least_share * limit {
                let d = caller.get_or_insert_with(|| who.take().map_or_else(anon, |f| f()));
                if after > self.settings.shares[d.tier.index()] * limit {
                    self.sheds[d.tier.index()].fetch_add(1, Ordering::Relaxed);
                    let mut d = caller.take().unwrap_or_else(anon);
                    d.reject(Reason::Overload, rand::thread_rng().gen_range(1..=5));
                    return Err(Box::new(d));
                }
            }
            match self.inflight.compare_exchange_weak(
                current,
                current + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Ok(Slot(Some(Box::new(Taken {
                        overload: Arc::clone(self),
                        sent: None,
                    }))))
                }
                Err(now) => current = now,
            }
        }
    }

    /// Requests in flight now.
    pub fn inflight(&self) -> u32 {
        self.inflight.load(Ordering::Relaxed)
    }

    /// The limit now.
    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Requests of `tier` shed so far.
    pub fn sheds(&self, tier: Tier) -> u64 {
        self.sheds[tier.index()].load(Ordering::Relaxed)
    }

    fn micros(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

/// A caller no decider named (scripted deciders in tests).
fn anon() -> Decision {
    Decision::new(Tier::Anon, "", None)
}

/// A slot at the upstream (or none: `[overload]` is off); dropping it frees the slot. Boxed:
/// it rides in every connection's future, which a held request keeps (see `front`'s size test).
#[derive(Debug, Default)]
pub struct Slot(Option<Box<Taken>>);

#[derive(Debug)]
struct Taken {
    overload: Arc<Overload>,
    /// When the request went upstream (µs since the epoch) and how many were in flight then;
    /// `None`: not sent, no sample.
    sent: Option<(u64, u32)>,
}

impl Slot {
    /// The request goes upstream now: its latency from here is a sample for the adaptive
    /// limit.
    pub fn start(&mut self) {
        if let Some(t) = &mut self.0 {
            t.sent = Some((t.overload.micros(), t.overload.inflight()));
        }
    }

    /// Frees the slot without a sample (a request that will not be answered like the others:
    /// a tunnel).
    pub fn cancel(mut self) {
        if let Some(t) = &mut self.0 {
            t.sent = None;
        }
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        let o = &self.overload;
        o.inflight.fetch_sub(1, Ordering::AcqRel);
        if let (Some((sent, inflight)), Some(g)) = (self.sent, &o.gradient) {
            let mut g = g.lock().unwrap_or_else(|e| e.into_inner());
            let limit = g.sample(sent, o.micros(), inflight);
            o.limit.store(limit, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::overload::RawOverload;

    fn overload(text: &str) -> Arc<Overload> {
        let raw: RawOverload = toml::from_str(&format!("enabled = true\n{text}")).unwrap();
        Overload::new(&OverloadSettings::validate(raw).unwrap()).unwrap()
    }

    fn caller(tier: Tier) -> impl FnOnce() -> Decision {
        move || Decision::new(tier, "who", Some("Sign in at /login.".into()))
    }

    #[test]
    fn each_tier_fills_its_share_and_no_more() {
        let o = overload("max_inflight = 10\nnever_shed = [\"/login\"]");
        let mut held = Vec::new();
        // Anonymous: refused once 6 (0.6 × 10) are in flight.
        while let Ok(s) = o.try_admit("/", caller(Tier::Anon)) {
            held.push(s);
        }
        assert_eq!(o.inflight(), 6);
        let shed = o.try_admit("/", caller(Tier::Anon)).unwrap_err();
        assert_eq!(shed.reason(), Some(Reason::Overload));
        assert_eq!(shed.upgrade.as_deref(), Some("Sign in at /login."));
        assert!((1..=5).contains(&shed.retry_after_secs().unwrap()));
        while let Ok(s) = o.try_admit("/", caller(Tier::Session)) {
            held.push(s);
        }
        assert_eq!(o.inflight(), 8, "0.85 × 10, whole requests");
        held.push(o.try_admit("/", caller(Tier::Sponsor)).unwrap());
        held.push(o.try_admit("/", caller(Tier::Sponsor)).unwrap());
        assert!(o.try_admit("/", caller(Tier::Sponsor)).is_err());
        // A never-shed route passes even at the limit.
        held.push(o.try_admit("/login/x", caller(Tier::Anon)).unwrap());
        assert_eq!((o.sheds(Tier::Anon), o.sheds(Tier::Sponsor)), (2, 1));
        held.clear();
        assert_eq!(o.inflight(), 0);
    }

    #[test]
    fn the_caller_is_named_only_when_someone_could_be_shed() {
        let o = overload("max_inflight = 10");
        let _a = o
            .try_admit("/", || panic!("named below every share"))
            .unwrap();
        assert!(
            Overload::new(&OverloadSettings::default()).is_none(),
            "off by default"
        );
    }

    #[test]
    fn many_threads_never_pass_the_limit() {
        let o = overload("max_inflight = 7");
        let most = Arc::new(AtomicU32::new(0));
        std::thread::scope(|s| {
            for _ in 0..8 {
                let (o, most) = (Arc::clone(&o), Arc::clone(&most));
                s.spawn(move || {
                    for _ in 0..2000 {
                        if let Ok(slot) = o.try_admit("/", caller(Tier::Sponsor)) {
                            most.fetch_max(o.inflight(), Ordering::Relaxed);
                            drop(slot);
                        }
                    }
                });
            }
        });
        assert!(most.load(Ordering::Relaxed) <= 7);
        assert_eq!(o.inflight(), 0);
    }
}
