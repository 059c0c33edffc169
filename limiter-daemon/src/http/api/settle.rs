//! The one path from a described request to what a front end is told, shared by
//! `POST /v1/decide` ([`decision`] alone: the caller enforces), `/v1/auth` and Envoy's gRPC
//! services (`crate::http::grpc`, both through [`settle`]): the engine's decision, then a 429
//! (or a 503 past the held-request bounds) to hand back, or a hold for the decision's delay
//! followed by an allow. Each surface only reads its own fields into a [`RequestView`] and
//! writes the outcome in its own wire format.

use std::num::NonZeroU32;

use bytes::Bytes;
use http::Response;

use crate::engine::decider::{Decided, Decider, RequestView};
use crate::http::api::state::ApiState;
use crate::http::proxy::admit::{next, Next};
use crate::http::render::negotiate::Format;
use crate::model::Decision;

/// The engine's decision on `view`, counted at `cost` units when the front end states one
/// (else at the route's).
pub async fn decision(
    decider: &dyn Decider,
    view: &RequestView<'_>,
    cost: Option<NonZeroU32>,
) -> Decision {
    let decided = match cost {
        None => decider.decide_async(view),
        Some(cost) => decider.decide_async_costing(view, cost),
    };
    match decided {
        Decided::Ready(d) => d,
        Decided::Pending(f) => f.await,
    }
}

/// What the front end is told once any hold is over.
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

/// Decides `view` and holds a delayed request (within `[http] max_held` and
/// `max_held_per_identity`) before allowing it.
pub async fn settle(state: &ApiState, view: &RequestView<'_>, cost: Option<NonZeroU32>) -> Settled {
    let d = decision(&*state.decider, view, cost).await;
    // Caddy, Traefik and Envoy hand a refusal to the client as it is: a browser's `Accept`,
    // passed on with the original request's fields, gets the page.
    match next(&d, &state.gate, &state.hints, Format::of(view.headers)) {
        Next::Answer(response) => Settled::Refused {
            decision: d,
            response,
        },
        Next::Hold(permit) => {
            tokio::time::sleep(d.delay()).await;
            drop(permit);
            Settled::Allowed(d)
        }
        Next::Forward => Settled::Allowed(d),
    }
}
