//! Envoy's gRPC services on `[http] grpc_listen`, from Envoy's own protos (`envoy-types`):
//! [`check`] (ext_authz `envoy.service.auth.v3.Authorization/Check`) and [`ratelimit`]
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, whose [`descriptors`] map
//! onto a request), both deciding through [`crate::edge::steps`] like `/v1/decide` and
//! `/v1/auth`. [`fields`] builds the header maps both read and write, [`invalid`] the
//! `INVALID_ARGUMENT` that names the field, [`token`] checks `[http] api_token_file` in the
//! call's metadata, [`access`] writes their access log lines, and [`serve`] runs both on the
//! listeners.

pub mod access;
pub mod check;
pub mod descriptors;
pub mod fields;
pub mod invalid;
pub mod ratelimit;
pub mod serve;
pub mod token;
