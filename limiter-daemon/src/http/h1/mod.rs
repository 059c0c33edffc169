//! HTTP/1 wire code, one implementation on bytes for every loop that speaks it: the chunked
//! transfer coding ([`chunked`]) and hop-by-hop hygiene ([`hop`]).

pub mod chunked;
pub mod hop;
