//! A background thread owned by a value: dropping the value cancels the thread's token and
//! joins it, so the thread never outlives what owns it, even where no shutdown stops it (tests
//! and benches build engines outside any runtime and any shutdown). The key cache's refresher
//! and the crawler DNS checks run on one each.

use std::thread::JoinHandle;

use tokio_util::sync::CancellationToken;

pub struct OwnedThread {
    stop: CancellationToken,
    handle: Option<JoinHandle<()>>,
}

impl OwnedThread {
    /// Owns `handle` (`None`: the thread could not be started), stopped through `stop`.
    pub fn new(stop: CancellationToken, handle: Option<JoinHandle<()>>) -> Self {
        OwnedThread { stop, handle }
    }
}

impl Drop for OwnedThread {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(h) = self.handle.take() {
            let _joined = h.join();
        }
    }
}
