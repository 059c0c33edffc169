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
    #[error(transparent)]
    LockPrefixTooWide(#[from] limiter_common::args::TooWide),
    #[error("{net} holds the trusted proxy {proxy}: locking it would lock out every client behind it; lock the client's own address instead")]
    TrustedProxy {
        net: ipnet::IpNet,
        proxy: ipnet::IpNet,
    },
    #[error("could not find a free API key id")]
    NoFreeKeyId,
    #[error("AS{asn} is not in the IP-to-ASN table in force ([networks] asn_table or asn_url)")]
    AsnUnknown { asn: u32 },
    #[error("AS{asn} spans {cidrs} CIDRs, more than the {max} one lockout may write; lock its busiest prefixes instead")]
    AsnTooWide { asn: u32, cidrs: usize, max: usize },
}
