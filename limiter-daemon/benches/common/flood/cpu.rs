//! The receiver's CPU time, read per thread so that other work on a shared machine is not
//! counted: the receiver's NAPI thread, plus `ksoftirqd` of the CPU it is pinned to (softirq
//! work that outgrows the thread's own `local_bh_enable` is deferred there).
//!
//! This kernel has no `CONFIG_IRQ_TIME_ACCOUNTING`, so softirq work done while a thread runs is
//! charged to that thread's runtime; with it, the softirq share would have to be read from
//! `/proc/stat` instead. Run time is `sum_exec_runtime` from `/proc/<pid>/schedstat`, in ns.

/// Restricts `pid` (0: the calling thread) to `cpu`.
pub fn pin(pid: i32, cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes inside it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below the number of online CPUs, well inside the set's 1024 bits.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(pid, std::mem::size_of_val(&set), &set) };
    assert_eq!(
        rc,
        0,
        "pinning pid {pid} to CPU {cpu}: {}",
        std::io::Error::last_os_error()
    );
}

/// Puts the calling thread on `SCHED_FIFO`, so the sender keeps its CPU against other work on
/// a shared machine (a flood that only offers what a time-shared core can is no flood). The
/// commands it starts afterwards (`ip`, `nft`) go back to the normal policy.
pub fn realtime() {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: `param` is a valid sched_param; 0 is the calling thread.
    let rc = unsafe {
        libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param)
    };
    assert_eq!(
        rc,
        0,
        "SCHED_FIFO for the sender: {}",
        std::io::Error::last_os_error()
    );
}

/// Online CPUs.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Nanoseconds `pid` has run.
pub fn run_ns(pid: i32) -> u64 {
    let path = format!("/proc/{pid}/schedstat");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    text.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{path}: unexpected {text:?}"))
}

/// The pid of `ksoftirqd/<cpu>`.
pub fn ksoftirqd(cpu: usize) -> i32 {
    let want = format!("ksoftirqd/{cpu}");
    std::fs::read_dir("/proc")
        .expect("listing /proc")
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == want)
        })
        .unwrap_or_else(|| panic!("no {want} thread"))
}

/// The threads whose run time is the receiver's CPU.
pub struct ReceiverCpu {
    threads: Vec<i32>,
}

impl ReceiverCpu {
    /// The receiver's NAPI thread `napi`, pinned to `cpu`, and that CPU's ksoftirqd.
    pub fn pinned(napi: i32, cpu: usize) -> Self {
        pin(napi, cpu);
        ReceiverCpu {
            threads: vec![napi, ksoftirqd(cpu)],
        }
    }

    /// Their run time so far, in ns.
    pub fn ns(&self) -> u64 {
        self.threads.iter().map(|p| run_ns(*p)).sum()
    }
}
