//! The API listener: [`router`] (its routes over one [`state`]), [`decide`] (`POST /v1/decide`, its body read
//! within bounds by [`decide_body`]) and [`auth_request`] (`/v1/auth` for
//! nginx, Caddy, Traefik and Envoy, each by its [`auth_convention`]).
//! [`own_loop`] serves forward auth without hyper or the router.
//! [`browser`] keeps web pages out of `/v1/decide` (and of the admin API). Each request runs
//! the steps every surface shares ([`crate::edge::steps`]).

pub mod access;
pub mod auth_convention;
pub mod auth_request;
pub mod browser;
pub mod decide;
pub mod decide_body;
pub mod own_loop;
pub mod router;
pub mod state;
pub mod token;
