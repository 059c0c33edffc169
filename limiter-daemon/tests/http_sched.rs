//! The proxy threads' scheduling policy: always `SCHED_BATCH` (a file's removed
//! `batch_scheduling` is dropped with a warning as it loads: `engine_check_config`). A test binary of its own, so no other test's proxy threads share
//! the process while `/proc/self/task` is read.

mod http_support;

use http_support::*;

/// Scheduling policy (`/proc/<tid>/stat` field 41) of every proxy thread in this process.
fn proxy_thread_policies() -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("limiter-proxy") {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after `(comm)` start at field 3 (state); the policy is field 41.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        if let Some(policy) = rest.split_whitespace().nth(41 - 3) {
            out.push(policy.parse().unwrap());
        }
    }
    out
}

const SCHED_BATCH: u32 = 3;

#[tokio::test]
async fn proxy_threads_run_sched_batch() {
    let up = start_upstream().await;
    let d = start(settings(Some(up.addr), "worker_threads = 2\n"), by_header()).await;
    wait_until("two proxy threads on SCHED_BATCH", || {
        proxy_thread_policies() == [SCHED_BATCH, SCHED_BATCH]
    })
    .await;
    d.stop().await;
    assert!(
        proxy_thread_policies().is_empty(),
        "threads ended with the server"
    );
}
