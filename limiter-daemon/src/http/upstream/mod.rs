//! The client to the upstream: [`client`] (the per-thread handle and hyper's client path),
//! [`direct`] (the direct exchange for bodyless requests) and [`pool`] (the connection cap and
//! the idle connections of both paths).

pub mod client;
pub mod direct;
pub mod pool;
