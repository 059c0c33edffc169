//! Signed agents (Web Bot Auth): the directory fetcher, the npm signer, the rung on the binary.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

mod rig;

mod agent_directory;
mod agent_rung;
mod agent_signer_npm;
