//! A request's steps, written once (the habit of pingora's `ProxyHttp`). Every surface runs a
//! request through [`Steps`]' phases in this order; only the wire around them differs:
//!
//! 1. [`Steps::resolve`]: who sent it, from the peer it came from and its forwarding fields
//!    (one walk, [`crate::identity::client_ip`]), carried from then on as a
//!    [`Client`] in the [`RequestView`];
//! 2. [`Steps::shed`] (the proxy's alone), then [`Steps::decide`]: a slot at the upstream
//!    under `[overload]`, or the 503 that sheds the request before anything is counted; then
//!    the engine's decision, awaited, never blocked on;
//! 3. [`Steps::admit`], then [`Steps::hold`]: a refusal to answer (429, or 503 past the held
//!    bounds), a hold for the decision's delay within [`hold::HoldGate`]'s bounds, or go; a
//!    held request waits without its slot and takes one again after
//!    ([`Steps::hold_then_reshed`]);
//! 4. forward: the proxy's alone (the decision API, forward auth and gRPC tell a front end
//!    instead), in its slot until the upstream has answered;
//! 5. [`Steps::render`]: the decision's rate-limit fields on whatever is answered;
//! 6. log: [`Steps::access_log`], one line per request ([`crate::edge::access_log`]).
//!
//! Who calls them: the proxy's HTTP/1.1 loop ([`crate::proxy::front`]) and hyper's
//! server ([`crate::proxy::hyper`]: HTTP/1.1, HTTP/2, TLS, WebSocket upgrades) run all
//! six; `/v1/auth` and Envoy's gRPC services ([`Steps::settle`]) and `/v1/decide`
//! ([`Steps::decide`] alone: its caller enforces) run them without forwarding.

pub mod hold;
pub mod slots;

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Response};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::edge::access_log::record::mark;
use crate::edge::access_log::{AccessLog, Verdict};
use crate::edge::overload::{Overload, Slot};
use crate::edge::render::negotiate::Format;
use crate::edge::render::response::Hints;
use crate::edge::render::response::{hold_cut_short, hold_overflow, rejection, write_headers};
use crate::engine::decider::{Decided, Decider, RequestView};
use crate::identity::client_ip::Client;
use crate::model::{Action, Decision};
use hold::{HoldGate, HoldPermit};

/// What every phase needs, shared by all of one surface's requests.
#[derive(Clone)]
pub struct Steps {
    pub decider: Arc<dyn Decider>,
    pub gate: Arc<HoldGate>,
    pub hints: Hints,
    /// Cancelled when the shutdown grace period ends: requests still held are answered 503.
    pub grace_over: CancellationToken,
    /// `[log] access`: one line per request (off by default).
    pub access_log: AccessLog,
    /// `[overload]`: the ladder when the upstream saturates (`None`: off).
    pub overload: Option<Arc<Overload>>,
}

/// What the decision on a request lets happen next (phase 3).
pub enum Admission {
    /// Go on, with these rate-limit fields, in this slot at the upstream.
    Forward(Decision, Slot),
    /// Hold it for the decision's delay, then go on; the permit counts it against the
    /// held-request bounds until dropped.
    Hold(Decision, HoldPermit),
    /// Answer it now: a 429, or a 503 when its held-request bound is reached.
    Answer(Response<Bytes>),
}

/// [`Admission`] without the decision.
pub enum Next {
    Go,
    Hold(HoldPermit),
    Answer(Response<Bytes>),
}

/// What a front end is told once any hold is over ([`Steps::settle`]).
pub enum Settled {
    /// Let the request through, with this decision's rate-limit fields.
    Allowed(Decision),
    /// Answer the client with `response` (the daemon's 429, or a 503 past the held-request
    /// bounds); `decision` is the one that refused.
    Refused {
        decision: Decision,
        response: Response<Bytes>,
    },
}

impl Steps {
    /// 1. Who sent a request that came from `peer` with `headers`.
    pub fn resolve(&self, peer: IpAddr, headers: &HeaderMap) -> Client {
        self.decider.resolve(peer, headers)
    }

    /// 2. The engine's decision on `view`, counted at `cost` units when the front end states
    ///    one (else at the route's). A remote store's round trip costs this task, not the
    ///    thread.
    pub async fn decide(&self, view: &RequestView<'_>, cost: Option<NonZeroU32>) -> Decision {
        let decided = match cost {
            None => self.decider.decide_async(view),
            Some(cost) => self.decider.decide_async_costing(view, cost),
        };
        match decided {
            Decided::Ready(d) => d,
            Decided::Pending(f) => f.await,
        }
    }

    /// 3. What `decision` lets happen next. A refusal's body is in `format` (what the
    ///    request's `Accept` prefers). Only a request that goes on keeps `slot`: a held one
    ///    waits without it.
    pub fn admit(&self, decision: Decision, mut slot: Slot, format: Format) -> Admission {
        match self.next(&decision, format) {
            Next::Answer(resp) => Admission::Answer(resp),
            Next::Hold(permit) => Admission::Hold(decision, permit),
            Next::Go => {
                slot.start();
                Admission::Forward(decision, slot)
            }
        }
    }

    /// [`Steps::admit`] for a caller that keeps the decision (a refusal's fields are read
    /// from it).
    pub fn next(&self, decision: &Decision, format: Format) -> Next {
        match decision.action() {
            Action::Reject => Next::Answer(rejection(decision, &self.hints, format)),
            Action::Delay => match self.gate.try_hold(&decision.identity) {
                Some(permit) => Next::Hold(permit),
                None => {
                    tracing::debug!(identity = %decision.identity, "held-request bound reached");
                    Next::Answer(hold_overflow(decision, format))
                }
            },
            Action::Allow => Next::Go,
        }
    }

    /// 3. Waits out a held request's delay on an async timer: it costs a task, not a thread.
    ///    `Err` is the 503 for a request still held when the shutdown grace period ended.
    ///    Boxed: a held request is the rare case, and an inline timer would be copied with
    ///    every request's future.
    pub async fn hold(
        &self,
        decision: &Decision,
        permit: HoldPermit,
    ) -> Result<(), Response<Bytes>> {
        Box::pin(async move {
            let until = Instant::now() + decision.delay();
            let held = tokio::select! {
                () = tokio::time::sleep_until(until) => Ok(()),
                () = self.grace_over.cancelled() => {
                    Err(hold_cut_short(decision, until.saturating_duration_since(Instant::now())))
                }
            };
            drop(permit);
            held
        })
        .await
    }

    /// 2. A slot at the upstream for `view` (`[overload]`; a free one when off), or the 503
    ///    that sheds it (problem+json, or the HTML page for a browser). Asked before the
    ///    decision, so a shed request spends no budget and earns no strike; its caller is
    ///    named ([`Decider::caller`], nothing counted) only when some tier could be shed.
    #[expect(
        clippy::result_large_err,
        reason = "the answer is returned at once, as `Admission::Answer` carries it"
    )]
    pub fn shed(&self, view: &RequestView<'_>) -> Result<Slot, Response<Bytes>> {
        self.slot(view.path, Format::of(view.headers), || {
            self.decider.caller(view)
        })
    }

    /// 3. [`Steps::hold`] for a request to forward: a held request waits without its slot at
    ///    the upstream and takes one again for `decision`'s caller once the hold is over. `Err`:
    ///    cut short, or shed after all.
    pub async fn hold_then_reshed(
        &self,
        decision: &Decision,
        permit: HoldPermit,
    ) -> Result<Slot, Response<Bytes>> {
        self.hold(decision, permit).await?;
        let mut slot = self.slot("", Format::Problem, || decision.clone())?;
        slot.start();
        Ok(slot)
    }

    #[expect(clippy::result_large_err, reason = "as `Steps::shed`")]
    fn slot(
        &self,
        path: &str,
        format: Format,
        who: impl FnOnce() -> Decision,
    ) -> Result<Slot, Response<Bytes>> {
        let Some(overload) = &self.overload else {
            return Ok(Slot::default());
        };
        overload.try_admit(path, who).map_err(|d| {
            let verdict = self.access_log.is_on().then(|| Verdict::of(&d));
            mark(rejection(&d, &self.hints, format), verdict)
        })
    }

    /// 5. `decision`'s rate-limit fields on an answer's `headers`, replacing any there.
    pub fn render(&self, decision: &Decision, headers: &mut HeaderMap) {
        write_headers(decision, headers);
    }

    /// Phases 2 and 3 for a front end that enforces itself (`/v1/auth`, gRPC): decided, held
    /// (within `[http] max_held` and `max_held_per_identity`), then allowed or refused.
    pub async fn settle(&self, view: &RequestView<'_>, cost: Option<NonZeroU32>) -> Settled {
        let d = self.decide(view, cost).await;
        // Caddy, Traefik and Envoy hand a refusal to the client as it is: a browser's `Accept`,
        // passed on with the original request's fields, gets the page.
        match self.next(&d, Format::of(view.headers)) {
            Next::Answer(response) => Settled::Refused {
                decision: d,
                response,
            },
            Next::Hold(permit) => match self.hold(&d, permit).await {
                Ok(()) => Settled::Allowed(d),
                Err(response) => Settled::Refused {
                    decision: d,
                    response,
                },
            },
            Next::Go => Settled::Allowed(d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::overload::{InflightLimit, OverloadSettings};
    use crate::model::Tier;

    struct Anyone;
    impl Decider for Anyone {
        fn decide(&self, _req: &RequestView<'_>) -> Decision {
            Decision::new(Tier::Sponsor, "s", None)
        }
    }

    #[tokio::test]
    async fn a_held_request_waits_without_its_slot_and_takes_one_again_after() {
        let settings = OverloadSettings {
            enabled: true,
            limit: InflightLimit::Fixed(1),
            ..Default::default()
        };
        let steps = Steps {
            decider: Arc::new(Anyone),
            gate: HoldGate::new(4, 4),
            hints: Hints::default(),
            grace_over: CancellationToken::new(),
            access_log: AccessLog::default(),
            overload: Overload::new(&settings),
        };
        let overload = steps.overload.clone().unwrap();
        let d = Decision::new(Tier::Sponsor, "s", None);
        // While it was held, another request took the one slot: it is shed after its hold.
        let busy = overload.try_admit("/", || d.clone()).unwrap();
        let permit = steps.gate.try_hold("s").unwrap();
        let shed = steps.hold_then_reshed(&d, permit).await.unwrap_err();
        assert_eq!(shed.status(), http::StatusCode::SERVICE_UNAVAILABLE);
        drop(busy);
        let permit = steps.gate.try_hold("s").unwrap();
        let slot = steps.hold_then_reshed(&d, permit).await.unwrap();
        assert_eq!((overload.inflight(), steps.gate.held()), (1, 0));
        drop(slot);
        assert_eq!(overload.inflight(), 0);
    }
}
