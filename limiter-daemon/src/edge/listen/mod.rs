//! How the daemon's axum routers are served: the decision API (`[http] api_listen`), the admin
//! API (`[admin] listen`) and the operator listener (`[metrics] listen`) all go through
//! [`serve`], so each has the bounds the proxy's listeners have against slow or idle clients.
//!
//! - [`limits`]: the bounds, taken from `[http]`: the head-read timeout (which is also the
//!   idle keep-alive timeout, as on the proxy), the body-read timeout, the connection cap.
//! - [`budget`]: every listener's connection cap, derived from the descriptor limit unless
//!   set, so no listener's clients can take the descriptors the others need.
//! - [`client_caps`]: the proxy listeners' caps, over all of them and per client address.
//! - [`accept`]: what an accept loop does when `accept` fails: back off, log sparingly.
//! - [`body`]: the request body that ends in an error once its read deadline has passed.
//! - [`serve`]: the accept loop and one connection's life (HTTP/1.1 only), a loop of the
//!   listener's own first when it has one.
//! - [`rewind`]: the bytes such a loop read, put back for hyper.
//! - [`peek`]: waiting for a connection's first bytes without taking them.
//! - [`proxy_protocol`]: the PROXY protocol header a proxy listener may read first.
//!
//! Why not `axum::serve`: it sets no read timeout and no cap, so a client dripping one header
//! byte every few seconds, or a half-sent body, held its connection (and the body buffered so
//! far) for as long as it liked, before any token was checked.

pub mod accept;
pub mod body;
pub mod budget;
pub mod client_caps;
pub mod limits;
pub mod peek;
pub mod proxy_protocol;
pub mod rewind;
pub mod serve;
