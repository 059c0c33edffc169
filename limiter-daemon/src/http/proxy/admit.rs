//! The admission step every surface that holds shares (the proxy's paths and `/v1/auth`): a
//! decision becomes a 429 to answer, a hold within the held-request bounds (503 past them), or
//! a forward.

use std::sync::Arc;

use bytes::Bytes;
use http::Response;

use crate::http::proxy::hold::{HoldGate, HoldPermit};
use crate::http::render::negotiate::Format;
use crate::http::render::response::{hold_overflow, rejection, Hints};
use crate::model::{Action, Decision};

/// What the decision on a request lets happen next.
pub enum Admission {
    /// Forward it, with these rate-limit headers.
    Forward(Decision),
    /// Hold it for the decision's delay, then forward it; the permit counts it against the
    /// held-request bounds until dropped.
    Hold(Decision, HoldPermit),
    /// Answer it now: a 429, or a 503 when its held-request bound is reached.
    Answer(Response<Bytes>),
}

/// What `decision` lets happen next: reject, hold (within `gate`'s bounds) or forward. A
/// refusal's body is in `format` (what the request's `Accept` prefers).
pub fn admission(
    decision: Decision,
    gate: &Arc<HoldGate>,
    hints: &Hints,
    format: Format,
) -> Admission {
    match next(&decision, gate, hints, format) {
        Next::Answer(resp) => Admission::Answer(resp),
        Next::Hold(permit) => Admission::Hold(decision, permit),
        Next::Forward => Admission::Forward(decision),
    }
}

/// [`admission`] for a caller that keeps the decision (a refusal's fields are read from it).
pub enum Next {
    Forward,
    Hold(HoldPermit),
    Answer(Response<Bytes>),
}

/// What `decision` lets happen next, the decision left with the caller.
pub fn next(decision: &Decision, gate: &Arc<HoldGate>, hints: &Hints, format: Format) -> Next {
    match decision.action() {
        Action::Reject => Next::Answer(rejection(decision, hints, format)),
        Action::Delay => match gate.try_hold(&decision.identity) {
            Some(permit) => Next::Hold(permit),
            None => {
                tracing::debug!(identity = %decision.identity, "held-request bound reached");
                Next::Answer(hold_overflow(decision, format))
            }
        },
        Action::Allow => Next::Forward,
    }
}
