//! Errors from the engine's management calls (issuing keys, lifting lockouts, lists). Decisions
//! themselves never fail: they are values.

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("store operation failed")]
    Store(#[from] StoreError),
    #[error("`hourly_limit` must be at least 1")]
    ZeroHourlyLimit,
    #[error("{id:?} is not an API key id (8 lower-case hex digits)")]
    BadKeyId { id: String },
    #[error("lockout duration must be longer than zero")]
    ZeroDuration,
    #[error("{net} is wider than a lockout may be (at least /{min}); use the deny list for wider ranges")]
    LockPrefixTooWide { net: ipnet::IpNet, min: u8 },
    #[error("{net} holds the trusted proxy {proxy}: locking it would lock out every client behind it; lock the client's own address instead")]
    TrustedProxy {
        net: ipnet::IpNet,
        proxy: ipnet::IpNet,
    },
    #[error("could not find a free API key id")]
    NoFreeKeyId,
}
