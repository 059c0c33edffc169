//! identity (placeholder until its issue lands).
