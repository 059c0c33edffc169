//! What the daemon writes itself: [`response`] (rate-limit fields, the 429 and the other
//! answers a decision makes) and [`problem`] (`application/problem+json` bodies).

pub mod problem;
pub mod response;
