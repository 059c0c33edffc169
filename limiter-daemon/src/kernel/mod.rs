//! kernel (placeholder until its issue lands).
