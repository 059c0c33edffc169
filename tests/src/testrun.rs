//! A private, freshly loaded instance of the real kernel program for BPF_PROG_TEST_RUN tests:
//! typed writes to its maps, runs of either entry point on a frame, summed counters.
//!
//! The object declares its maps pinnable by name (so the daemon's pinned state is adopted); aya
//! pins such maps even when the loader names no directory, so each instance gets a directory of
//! its own under `/sys/fs/bpf` (removed on drop) and tests never share a map.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, HashMap, MapData, PerCpuArray};
use aya::programs::{SchedClassifier, TestRun, TestRunOptions, Xdp};
use aya::{Ebpf, EbpfLoader};
use limiter_common::lockout_cache::{lockout_slot, slot_on_lock, slot_on_unlock};
use limiter_common::maps::{
    AllowMark, CidrBytes, Counter, PortMark, MAP_ALLOW, MAP_BUCKET, MAP_CONFIG, MAP_COUNTERS,
    MAP_DENY, MAP_LOCKOUT, MAP_LOCKOUT_CACHE, MAP_PORTS, MAP_TIER, PROG_BENCH_PASS, PROG_TC,
    PROG_XDP,
};
use limiter_common::{
    verdict, Bucket, DenyEntry, IpKey, KernelConfig, Lockout, LockoutSlot, TierEntry,
};

pub const XDP_ABORTED: u32 = 0;
pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const TC_ACT_OK: i32 = 0;
pub const TC_ACT_SHOT: i32 = 2;

/// Where `cargo xtask build-ebpf` leaves the object.
pub fn object_path() -> PathBuf {
    crate::workspace_root().join("limiter-ebpf/target/bpfel-unknown-none/release/limiter-ebpf")
}

/// `CLOCK_BOOTTIME` in ns: the clock `bpf_ktime_get_boot_ns` reads, so deadlines written relative
/// to it are compared by the program exactly as the daemon's are.
pub fn boottime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_BOOTTIME)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The key the program uses for `ip`: IPv4 mapped, IPv6 masked to `v6_prefix_len`.
pub fn key(ip: IpAddr, v6_prefix_len: u32) -> IpKey {
    match ip {
        IpAddr::V4(v4) => IpKey::from_v4(v4.octets()),
        IpAddr::V6(v6) => IpKey::from_v6(v6.octets(), v6_prefix_len),
    }
}

/// LPM key for a CIDR, in the 128-bit space the program looks up (IPv4 as `::ffff:0:0/96`+).
pub fn cidr_key(ip: IpAddr, prefix_len: u32) -> Key<CidrBytes> {
    match ip {
        IpAddr::V4(v4) => Key::new(
            limiter_common::key::v4_prefix_in_v6(prefix_len),
            IpKey::from_v4(v4.octets()).addr,
        ),
        IpAddr::V6(v6) => Key::new(prefix_len, v6.octets()),
    }
}

/// Verdict counters summed over CPUs, indexed by `limiter_common::verdict`.
pub type Counts = [u64; verdict::COUNT as usize];

pub struct Instance {
    ebpf: Ebpf,
    pin_dir: PathBuf,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl Instance {
    /// Loads a private instance, or returns `None` (skipping, never under CI) without root.
    /// Panics when the object has not been built.
    pub fn load() -> Option<Self> {
        Self::load_sized(&[(MAP_BUCKET, 4096), (MAP_TIER, 4096)])
    }

    /// As [`Instance::load`], overriding map capacities (`(name, max_entries)`).
    pub fn load_sized(sizes: &[(&str, u32)]) -> Option<Self> {
        if !crate::require(
            crate::is_root(),
            "root (BPF_PROG_TEST_RUN loads a BPF program)",
        ) {
            return None;
        }
        let path = object_path();
        assert!(
            path.exists(),
            "{} is missing: run `cargo xtask build-ebpf`",
            path.display()
        );
        let pin_dir = PathBuf::from(format!(
            "/sys/fs/bpf/limiter-test-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&pin_dir).expect("create a pin directory in bpffs");
        let mut loader = EbpfLoader::new();
        loader.default_map_pin_directory(&pin_dir);
        for (name, size) in sizes {
            loader.map_max_entries(name, *size);
        }
        let mut ebpf = match loader.load_file(&path) {
            Ok(ebpf) => ebpf,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&pin_dir);
                panic!("loading {}: {e:?}", path.display());
            }
        };
        let xdp: &mut Xdp = ebpf.program_mut(PROG_XDP).unwrap().try_into().unwrap();
        xdp.load()
            .unwrap_or_else(|e| panic!("verifier rejected {PROG_XDP}: {e:?}"));
        let tc: &mut SchedClassifier = ebpf.program_mut(PROG_TC).unwrap().try_into().unwrap();
        tc.load()
            .unwrap_or_else(|e| panic!("verifier rejected {PROG_TC}: {e:?}"));
        let base: &mut Xdp = ebpf
            .program_mut(PROG_BENCH_PASS)
            .unwrap()
            .try_into()
            .unwrap();
        base.load()
            .unwrap_or_else(|e| panic!("verifier rejected {PROG_BENCH_PASS}: {e:?}"));
        Some(Self { ebpf, pin_dir })
    }

    /// Runs the XDP entry point once on `frame`, returning its action.
    pub fn xdp(&self, frame: &[u8]) -> u32 {
        self.try_xdp(frame)
            .unwrap_or_else(|e| panic!("TEST_RUN of {} bytes: {e}", frame.len()))
    }

    /// As [`Instance::xdp`] but returns the kernel's refusal (e.g. a frame shorter than Ethernet).
    pub fn try_xdp(&self, frame: &[u8]) -> Result<u32, aya::programs::ProgramError> {
        let prog: &Xdp = self.ebpf.program(PROG_XDP).unwrap().try_into().unwrap();
        let opts = TestRunOptions {
            data_in: Some(frame),
            ..Default::default()
        };
        Ok(prog.test_run(opts)?.return_value)
    }

    /// Runs the TC classifier once on `frame`, returning its action.
    pub fn tc(&self, frame: &[u8]) -> i32 {
        self.try_tc(frame)
            .unwrap_or_else(|e| panic!("TEST_RUN (tc) of {} bytes: {e:?}", frame.len()))
    }

    /// As [`Instance::tc`] but returns the kernel's refusal (an skb needs more than Ethernet).
    pub fn try_tc(&self, frame: &[u8]) -> Result<i32, aya::programs::ProgramError> {
        let prog: &SchedClassifier = self.ebpf.program(PROG_TC).unwrap().try_into().unwrap();
        let opts = TestRunOptions {
            data_in: Some(frame),
            ..Default::default()
        };
        Ok(prog.test_run(opts)?.return_value as i32)
    }

    fn map(&mut self, name: &str) -> &mut aya::maps::Map {
        self.ebpf
            .map_mut(name)
            .unwrap_or_else(|| panic!("map {name} missing from the object"))
    }

    pub fn set_config(&mut self, cfg: &KernelConfig) {
        let mut m: Array<&mut MapData, KernelConfig> = self.map(MAP_CONFIG).try_into().unwrap();
        m.set(0, cfg, 0).unwrap();
    }

    pub fn protect(&mut self, port: u16) {
        let mut m: Array<&mut MapData, PortMark> = self.map(MAP_PORTS).try_into().unwrap();
        m.set(port as u32, 1, 0).unwrap();
    }

    /// Locks `key` the way the daemon does: the hash, then its cache slot, with the slot
    /// transitions of `limiter_common::lockout_cache` (so the cache invariant holds).
    pub fn lock(&mut self, key: IpKey, deadline_ns: u64, level: u32) {
        let v = Lockout {
            deadline_ns,
            level,
            _reserved: 0,
        };
        self.lock_hash_only(key, deadline_ns, level);
        let index = lockout_slot(&key);
        let slot = self.slot(index);
        let occupant_in_hash = slot.is_occupied() && slot.key != key && self.locked(&slot.key);
        let next = slot_on_lock(&slot, &key, &v, occupant_in_hash);
        self.set_slot(index, next);
    }

    /// Lifts `key`'s lockout the way the daemon does: the hash, then its slot if it held it.
    pub fn unlock(&mut self, key: IpKey) {
        {
            let mut m: HashMap<&mut MapData, IpKey, Lockout> =
                self.map(MAP_LOCKOUT).try_into().unwrap();
            m.remove(&key).unwrap();
        }
        let index = lockout_slot(&key);
        if let Some(vacated) = slot_on_unlock(&self.slot(index), &key) {
            self.set_slot(index, vacated);
        }
    }

    /// Writes only the lockout hash, leaving the cache as it is: what a writer that bypasses the
    /// cache would do (tests of what the program trusts the cache with).
    pub fn lock_hash_only(&mut self, key: IpKey, deadline_ns: u64, level: u32) {
        let mut m: HashMap<&mut MapData, IpKey, Lockout> =
            self.map(MAP_LOCKOUT).try_into().unwrap();
        let v = Lockout {
            deadline_ns,
            level,
            _reserved: 0,
        };
        m.insert(key, v, 0).unwrap();
    }

    /// True when the lockout hash has `key`.
    pub fn locked(&mut self, key: &IpKey) -> bool {
        let m: HashMap<&mut MapData, IpKey, Lockout> = self.map(MAP_LOCKOUT).try_into().unwrap();
        m.get(key, 0).is_ok()
    }

    /// The lockout-cache slot at `index`.
    pub fn slot(&mut self, index: u32) -> LockoutSlot {
        let m: Array<&mut MapData, LockoutSlot> = self.map(MAP_LOCKOUT_CACHE).try_into().unwrap();
        m.get(&index, 0).unwrap()
    }

    /// Overwrites the lockout-cache slot at `index` (for states only a bug or a race could make).
    pub fn set_slot(&mut self, index: u32, slot: LockoutSlot) {
        let mut m: Array<&mut MapData, LockoutSlot> =
            self.map(MAP_LOCKOUT_CACHE).try_into().unwrap();
        m.set(index, slot, 0).unwrap();
    }

    pub fn allow(&mut self, ip: IpAddr, prefix_len: u32) {
        let mut m: LpmTrie<&mut MapData, CidrBytes, AllowMark> =
            self.map(MAP_ALLOW).try_into().unwrap();
        m.insert(&cidr_key(ip, prefix_len), 1, 0).unwrap();
    }

    pub fn deny(&mut self, ip: IpAddr, prefix_len: u32, deadline_ns: u64) {
        let mut m: LpmTrie<&mut MapData, CidrBytes, DenyEntry> =
            self.map(MAP_DENY).try_into().unwrap();
        m.insert(&cidr_key(ip, prefix_len), DenyEntry { deadline_ns }, 0)
            .unwrap();
    }

    pub fn set_tier(&mut self, key: IpKey, tier: u32, expires_ns: u64) {
        let mut m: HashMap<&mut MapData, IpKey, TierEntry> = self.map(MAP_TIER).try_into().unwrap();
        let v = TierEntry {
            expires_ns,
            tier,
            _reserved: 0,
        };
        m.insert(key, v, 0).unwrap();
    }

    pub fn bucket(&mut self, key: IpKey) -> Option<Bucket> {
        let m: HashMap<&mut MapData, IpKey, Bucket> = self.map(MAP_BUCKET).try_into().unwrap();
        m.get(&key, 0).ok()
    }

    pub fn set_bucket(&mut self, key: IpKey, bucket: Bucket) {
        let mut m: HashMap<&mut MapData, IpKey, Bucket> = self.map(MAP_BUCKET).try_into().unwrap();
        m.insert(key, bucket, 0).unwrap();
    }

    pub fn counters(&mut self) -> Counts {
        let m: PerCpuArray<&mut MapData, Counter> = self.map(MAP_COUNTERS).try_into().unwrap();
        let mut out = [0u64; verdict::COUNT as usize];
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = m.get(&(i as u32), 0).unwrap().iter().sum();
        }
        out
    }

    /// Runs `frame` through XDP and returns the action and the one counter that moved; panics if
    /// not exactly one counter moved by exactly one.
    pub fn xdp_counted(&mut self, frame: &[u8]) -> (u32, u32) {
        let before = self.counters();
        let action = self.xdp(frame);
        (action, moved_counter(&before, &self.counters()))
    }

    /// As [`Instance::xdp_counted`] for the TC entry point.
    pub fn tc_counted(&mut self, frame: &[u8]) -> (i32, u32) {
        let before = self.counters();
        let action = self.tc(frame);
        (action, moved_counter(&before, &self.counters()))
    }

    /// The underlying aya handle, for what the typed helpers do not cover.
    pub fn ebpf(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }
}

/// The single counter that grew by one between two snapshots; panics otherwise.
pub fn moved_counter(before: &Counts, after: &Counts) -> u32 {
    let moved: Vec<(usize, u64)> = before
        .iter()
        .zip(after)
        .enumerate()
        .filter(|(_, (b, a))| a != b)
        .map(|(i, (b, a))| (i, a - b))
        .collect();
    match moved.as_slice() {
        [(i, 1)] => *i as u32,
        _ => panic!("expected exactly one counter to move by one, got {moved:?}"),
    }
}

/// Counter name for messages.
pub fn counter_name(index: u32) -> &'static str {
    verdict::NAMES
        .get(index as usize)
        .copied()
        .unwrap_or("<out of range>")
}

impl Drop for Instance {
    fn drop(&mut self) {
        // Unlinking the pins frees each map once this instance's fds close too.
        if let Err(e) = std::fs::remove_dir_all(&self.pin_dir) {
            eprintln!("removing {}: {e}", self.pin_dir.display());
        }
    }
}
