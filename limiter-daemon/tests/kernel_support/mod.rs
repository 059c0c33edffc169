//! What the daemon's tests on the real dataplane share (included with `mod kernel_support;`):
//! a private pin directory under bpffs whose programs and maps are detached on drop.

use std::path::PathBuf;

use limiter_daemon::kernel::loader::detach;
use limiter_daemon::kernel::PinLayout;
use limiter_tests::netns::unique_name;

/// A unique directory under `/sys/fs/bpf`; everything pinned there is removed on drop, even
/// when the test fails.
pub struct Pins(pub PathBuf);

impl Pins {
    pub fn new(prefix: &str) -> Self {
        Pins(PathBuf::from("/sys/fs/bpf").join(unique_name(prefix)))
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        if self.0.exists() {
            if let Err(e) = detach(&PinLayout::new(&self.0)) {
                eprintln!("detaching {}: {e}", self.0.display());
            }
        }
    }
}
