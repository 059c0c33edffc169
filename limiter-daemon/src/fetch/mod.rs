//! What the daemon fetches from outside, off the request path: the HTTPS client ([`https`]:
//! HTTPS only, no redirects, bounded time and size, no internal targets), the crawler proof
//! sources (range lists and the ASN table: [`proof_sources`] holds them, [`proof_refresh`]
//! keeps them current, [`proof_disk`] keeps the last good copy, [`proof_parse`] reads them) and
//! signed agents' key directories ([`agent_directories`], into the cache `identity` reads).
//! It sits between `store` and `engine`: the engine holds the proof sources and starts the
//! fetchers, and puts new proofs in force through [`proof_refresh::Holder`].

pub mod agent_directories;
pub mod https;
pub mod proof_disk;
pub mod proof_parse;
pub mod proof_refresh;
pub mod proof_sources;
