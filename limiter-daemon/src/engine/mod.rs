//! The decision engine: tier ladder, burst/hourly/daily/key windows, scan delays, strikes and
//! lockouts. [`decision`] holds the types every HTTP surface renders; [`sink`] is how lockouts
//! and verified tiers reach the kernel.

pub mod decision;
pub mod sink;
