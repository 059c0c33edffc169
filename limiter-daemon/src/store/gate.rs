//! One counted decision's store work: the caller's lockout, if one is active, else one atomic
//! check-and-count. `CountStore::gate_and_count` returns a [`Gate`];
//! a remote store answers both in one round trip (the Valkey script reads the lockout key, which
//! shares the IP identity's hash tag, before it counts anything).

use super::count::CountOutcome;
use crate::model::Lockout;

#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(
    clippy::large_enum_variant,
    reason = "the counted answer is the common case; boxing it would allocate per decision"
)]
pub enum Gate {
    /// The caller's address is locked out at the request's time; nothing was counted.
    Locked(Lockout),
    /// Not locked: the request was checked and (if no window refused) counted.
    Counted(CountOutcome),
}
