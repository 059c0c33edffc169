//! The vocabulary of a fleet sharing one remote store: lockout events as every host sees them
//! (made or lifted on some host, carried on the store's lockout stream), and the sink each
//! host feeds them into (its lockout replica, its kernel maps).

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::model::{Lockout, StrikeRecord};

/// One entry of the lockout stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum LockoutEvent {
    /// An address lockout made (or lengthened), with the strike record it came with.
    Locked {
        lockout: Lockout,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        strikes: Option<StrikeRecord>,
        host: String,
    },
    /// An address lockout lifted; with `forget_strikes`, its strike record forgotten too (a
    /// host that predates the field lifts and keeps the record, as it always did).
    Lifted {
        ip: IpAddr,
        host: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        forget_strikes: bool,
    },
    /// A prefix lockout (a deny-list entry with a deadline) made.
    NetLocked {
        net: IpNet,
        until_ms: u64,
        reason: String,
        host: String,
    },
    /// A prefix lockout lifted.
    NetLifted { net: IpNet, host: String },
}

impl LockoutEvent {
    /// The host that made the event.
    pub fn host(&self) -> &str {
        match self {
            LockoutEvent::Locked { host, .. }
            | LockoutEvent::Lifted { host, .. }
            | LockoutEvent::NetLocked { host, .. }
            | LockoutEvent::NetLifted { host, .. } => host,
        }
    }
}

/// What a fleet store did since start (metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// Counted decisions that went to the shared store.
    pub remote_calls: u64,
    /// Of those, the ones past `decision_timeout` (counted locally instead).
    pub timeouts: u64,
    /// Decisions answered from the over-limit cache, without a round trip.
    pub over_limit_answers: u64,
    /// Lockout events from other hosts applied here.
    pub events_applied: u64,
    /// Lockout writes waiting for the store.
    pub writes_queued: u64,
    /// Lockout writes dropped because the queue was full.
    pub writes_dropped: u64,
    /// Decisions answered from a lease this host held, without a round trip.
    pub lease_answers: u64,
    /// Leases granted to this host: on a request's round trip, and refills behind requests.
    pub lease_grants: u64,
    pub lease_refills: u64,
    /// Give-backs of units a lease did not spend (per holder).
    pub lease_given_back: u64,
}

/// Where a host applies what the stream carries.
pub trait LockoutEvents: Send + Sync + 'static {
    /// One event, in stream order.
    fn apply(&self, event: &LockoutEvent);
    /// The whole set of active address lockouts (at start, and after a gap in the stream that
    /// could not be resumed): replaces what was known.
    fn reload(&self, active: Vec<(Lockout, Option<StrikeRecord>)>);
}
