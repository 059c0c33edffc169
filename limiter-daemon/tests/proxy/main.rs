//! The binary's reverse proxy: HTTP/2, TLS termination, WebSockets.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

mod proxy_h2;
mod proxy_tls;
mod proxy_websocket;
