//! What the daemon writes itself: [`response`] (rate-limit fields, the 429 and the other
//! answers a decision makes), [`problem`] (`application/problem+json` bodies), and for a
//! browser the same refusal as a [`page`], as [`negotiate`] decides from `Accept`.

pub mod negotiate;
pub mod page;
pub mod problem;
pub mod response;
