//! [`NetStrikes`]: each network's strike record, in memory only (a restart begins a network's
//! escalation anew). [`super::networks`] reads and bounds it under the engine's strike lock.

use std::collections::HashMap;

use crate::model::{NetworkName, StrikeRecord};

/// Strikes of each network, in memory.
#[derive(Default)]
pub(crate) struct NetStrikes(pub(super) HashMap<NetworkName, StrikeRecord>);
