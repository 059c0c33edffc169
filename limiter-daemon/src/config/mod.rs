//! config (placeholder until its issue lands).
