//! The client to the upstream: [`send`] (the one entry point, choosing the path), [`client`]
//! (the per-thread handle and hyper's client path), [`direct`] (the direct exchange for
//! bodyless requests), [`conn`] (a pooled connection of either path), [`pool`] (the connection
//! cap and the idle connections of both paths) and [`error`] (failures and counters).

pub mod client;
pub mod conn;
pub mod direct;
pub mod error;
pub mod pool;
pub mod send;
