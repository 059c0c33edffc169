//! The API listener: [`router`] (its routes over one [`state`]), [`decide`] (`POST /v1/decide`, its body read
//! within bounds by [`decide_body`]) and [`auth_request`] (`GET /v1/auth` for nginx).
//! [`browser`] keeps web pages out of `/v1/decide` (and of the admin API).

pub mod auth_request;
pub mod browser;
pub mod decide;
pub mod decide_body;
pub mod router;
pub mod state;
pub mod token;
