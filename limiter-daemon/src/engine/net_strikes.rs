//! [`NetStrikes`]: each network share's strike record, in memory only (a restart begins a network's
//! escalation anew). [`super::networks`] reads and bounds it under the engine's strike lock.

use std::collections::HashMap;

use super::net_share::NetShare;
use crate::model::StrikeRecord;

/// Strikes of each rung's share of each network ([`NetShare`]), in memory.
#[derive(Default)]
pub(crate) struct NetStrikes(pub(super) HashMap<NetShare, StrikeRecord>);
