//! The shared vocabulary at the bottom of the crate: what every layer above names and none of
//! them owns. [`address`] (one spelling per address: IPv4-mapped IPv6 as IPv4),
//! [`admin_marker`] (how the admin API's clients recognise it), [`tier`] (the
//! ladder's rungs), [`window`] (the counting windows, described once in a table, and the
//! reasons a reject gives), [`decision`] (what a decision says, rendered by every HTTP
//! surface), [`agent`] (a signed agent's name and what became of its signature), [`network`] (the networks a caller is also metered as), [`crawler`] (what became
//! of a crawler's claim), [`duration_text`] (the one duration grammar), [`prefix_set`]
//! (address prefixes looked up by length), [`request_path`] (a path as the upstream reads it,
//! which routes are chosen on) and [`records`] (what a store keeps: keys, strikes,
//! lockouts, list entries). It imports nothing else of the crate; [`address`], [`admin_marker`], [`duration_text`] and
//! [`tier`] live in `limiter-common`, shared with limiterctl.

pub use limiter_common::address;
pub use limiter_common::admin_marker;
pub mod agent;
pub mod crawler;
pub mod decision;
pub use limiter_common::duration_text;
pub mod identity_text;
pub mod network;
pub mod prefix_set;
pub mod records;
pub mod request_path;
pub use limiter_common::tier;
pub mod window;

pub use agent::AgentSignature;
pub use crawler::CrawlerStatus;
pub use decision::{Action, Decision, DecisionBuilder, DelayKind, KeyStatus, Shadow, Verdict};
pub use identity_text::IdentityText;
pub use network::{Locked, NetLevel, NetworkName, NetworkState};
pub use records::{KeyRecord, ListEntry, ListKind, LockCause, Lockout, StrikeRecord};
pub use tier::Tier;
pub use window::{Counts, PerWindow, Reason, Shape, WindowKind, WindowSpec, WindowState, WINDOWS};
