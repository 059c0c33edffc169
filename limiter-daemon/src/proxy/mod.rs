//! The reverse proxy. [`server`] binds the listeners and runs the workers; each connection
//! starts in [`front`] (the own HTTP/1.1 loop, a wire codec for bodyless requests) and is
//! handed to [`hyper`] for what the loop does not serve. Both run the steps every surface
//! shares ([`crate::edge::steps`]) and wait out holds on the raw connection in [`held`],
//! refuse what breaks [`request_rules`] or the head limits ([`crate::edge::limits`]), and stream bodies ([`body`],
//! [`request_body`]). [`sched`] sets the workers' scheduling policy. [`self_service`] answers
//! callers asking for their own limits, on both paths; [`access`] writes both paths' access
//! log lines. [`upstream`] is the pooled client to the app; [`tls`] terminates TLS in front
//! of both loops.

pub mod access;
pub mod body;
pub mod forward;
pub mod front;
pub mod h2;
pub mod h2_deadline;
pub mod h2_watch;
pub mod held;
pub mod hyper;
pub mod inspect;
pub mod request_body;
pub mod request_rules;
pub mod sched;
pub mod self_service;
pub mod server;
pub mod tls;
pub mod tunnel;
pub mod upstream;
