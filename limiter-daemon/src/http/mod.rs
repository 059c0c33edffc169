//! http (placeholder until its issue lands).
