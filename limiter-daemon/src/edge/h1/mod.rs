//! HTTP/1 wire code, one implementation on bytes for every loop that speaks it: the chunked
//! transfer coding ([`chunked`]), hop-by-hop hygiene ([`hop`]) and writing heads and answers
//! ([`write`]).

pub mod chunked;
pub mod framing;
pub mod hop;
pub mod write;
