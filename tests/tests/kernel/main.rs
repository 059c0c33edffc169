//! The kernel programs: BPF_PROG_TEST_RUN, fuzzing, and end to end in network namespaces.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

mod kernel_fuzz;
mod kernel_testrun;
mod netns_e2e;
