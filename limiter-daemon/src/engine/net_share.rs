//! One rung's share of one network: the unit network budgets are counted, struck and locked
//! in ([`super::networks`] says why each rung has its own). Its own file so the records that
//! key on it ([`super::net_senders`], [`super::net_strikes`]) need not import the decision
//! code that uses them.

use crate::model::{NetworkName, Tier};

/// One rung's share of one network: what its callers there count against, are struck as and
/// lock out together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct NetShare {
    pub name: NetworkName,
    pub tier: Tier,
}
