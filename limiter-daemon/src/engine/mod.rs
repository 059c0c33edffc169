//! The decision engine: tier ladder, burst/hourly/daily/key windows, scan delays, strikes and
//! lockouts. [`decision`] holds the types every HTTP surface renders; the engine issue fills in
//! the rest.

pub mod decision;
