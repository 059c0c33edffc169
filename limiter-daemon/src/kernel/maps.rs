//! Typed operations on the pinned maps, shared by the running daemon and the `kernel` CLI (which
//! opens the same pins while the daemon may be stopped).
//!
//! Each map sits behind its own mutex because aya's update calls take `&mut`; every operation is a
//! handful of `bpf()` syscalls, so holding a lock for one is cheap and never blocks on I/O.

use std::net::IpAddr;
use std::time::Duration;

use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, HashMap, Map, MapData, PerCpuArray};
use ipnet::IpNet;
use limiter_common::config::{FLAG_HAS_ALLOW, FLAG_HAS_DENY, FLAG_LOCK_ALL_PORTS, TIER_COUNT};
use limiter_common::maps::{
    AllowMark, CidrBytes, Counter, PortMark, MAP_ALLOW, MAP_BUCKET, MAP_CONFIG, MAP_COUNTERS,
    MAP_DENY, MAP_LOCKOUT, MAP_PORTS, MAP_TIER,
};
use limiter_common::{verdict, Bucket, DenyEntry, IpKey, KernelConfig, Lockout, TierEntry};
use parking_lot::Mutex;
use serde::Serialize;

use super::addr::{cidr_key, ip_key, key_cidr, key_ip};
use super::clock;
use super::error::{is_full, is_not_found};
use super::lockout_cache::LockoutTable;
use super::pins::PinLayout;
use super::KernelError;
use crate::config::kernel::KernelSettings;

/// Entries used against capacity for one map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MapFill {
    pub name: &'static str,
    pub entries: u32,
    pub capacity: u32,
}

/// Per-verdict packet counts, summed over CPUs, in `verdict::NAMES` order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counters(pub [u64; verdict::COUNT as usize]);

impl Counters {
    pub fn get(&self, index: u32) -> u64 {
        self.0.get(index as usize).copied().unwrap_or(0)
    }
    /// `(name, count)` pairs in index order.
    pub fn named(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        verdict::NAMES.iter().copied().zip(self.0.iter().copied())
    }
}

/// A lockout as read back from the kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LockoutView {
    pub ip: IpAddr,
    pub level: u32,
    /// Time left; `None` when the deadline has passed (the kernel no longer drops).
    #[serde(with = "opt_secs")]
    pub remaining: Option<Duration>,
}

/// A deny-list entry as read back from the kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DenyView {
    pub cidr: IpNet,
    /// `None`: no expiry.
    #[serde(with = "opt_secs")]
    pub remaining: Option<Duration>,
    pub expired: bool,
}

/// What a sweep removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub lockouts: u32,
    pub denies: u32,
}

mod opt_secs {
    use std::time::Duration;
    pub fn serialize<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }
}

/// One map opened twice: writes go through a mutex (aya's updates take `&mut`), reads and scans
/// use the second handle without a lock, so a long scan (status, sweep) never holds up a lockout
/// being written from the request path.
struct Shared<M> {
    write: Mutex<M>,
    read: M,
}

impl<M: TryFrom<Map, Error = aya::maps::MapError>> Shared<M> {
    fn open(layout: &PinLayout, name: &'static str) -> Result<Self, KernelError> {
        Ok(Self {
            write: Mutex::new(open(layout, name)?),
            read: open(layout, name)?,
        })
    }
}

impl<M> Shared<M> {
    fn read(&self) -> &M {
        &self.read
    }
    fn write(&self) -> parking_lot::MutexGuard<'_, M> {
        self.write.lock()
    }
}

/// Handles on every map the daemon writes or reads, opened from their pins.
pub struct KernelMaps {
    layout: PinLayout,
    config: Shared<Array<MapData, KernelConfig>>,
    ports: Shared<Array<MapData, PortMark>>,
    allow: Shared<LpmTrie<MapData, CidrBytes, AllowMark>>,
    deny: Shared<LpmTrie<MapData, CidrBytes, DenyEntry>>,
    /// The lockout hash and its cache (all lockout writes go through it).
    lockout: LockoutTable,
    tier: Shared<HashMap<MapData, IpKey, TierEntry>>,
    bucket: HashMap<MapData, IpKey, Bucket>,
    counters: PerCpuArray<MapData, Counter>,
}

fn open_raw(layout: &PinLayout, name: &'static str) -> Result<Map, KernelError> {
    let path = layout.map(name);
    let wrap = |source| KernelError::OpenMap {
        name,
        path: path.clone(),
        source: Box::new(source),
    };
    let data = MapData::from_pin(&path).map_err(wrap)?;
    Map::from_map_data(data).map_err(wrap)
}

pub(super) fn open<T>(layout: &PinLayout, name: &'static str) -> Result<T, KernelError>
where
    T: TryFrom<Map, Error = aya::maps::MapError>,
{
    let map = open_raw(layout, name)?;
    T::try_from(map).map_err(|source| KernelError::OpenMap {
        name,
        path: layout.map(name),
        source: Box::new(source),
    })
}

impl KernelMaps {
    /// Opens the maps pinned under `layout`.
    pub fn open(layout: &PinLayout) -> Result<Self, KernelError> {
        if !layout.has_maps() {
            return Err(KernelError::NotPinned {
                path: layout.root().to_path_buf(),
            });
        }
        Ok(Self {
            layout: layout.clone(),
            config: Shared::open(layout, MAP_CONFIG)?,
            ports: Shared::open(layout, MAP_PORTS)?,
            allow: Shared::open(layout, MAP_ALLOW)?,
            deny: Shared::open(layout, MAP_DENY)?,
            lockout: LockoutTable::open(layout)?,
            tier: Shared::open(layout, MAP_TIER)?,
            bucket: open(layout, MAP_BUCKET)?,
            counters: open(layout, MAP_COUNTERS)?,
        })
    }

    pub fn layout(&self) -> &PinLayout {
        &self.layout
    }

    // ---- config -------------------------------------------------------------------------------

    /// The config the kernel currently reads (all zero if never written).
    pub fn read_config(&self) -> Result<KernelConfig, KernelError> {
        self.config
            .read()
            .get(&0, 0)
            .map_err(|e| KernelError::map_op("reading", MAP_CONFIG, e))
    }

    /// IPv6 grouping prefix the kernel uses (its default until a config is written).
    pub fn v6_prefix(&self) -> Result<u32, KernelError> {
        let prefix = self.read_config()?.v6_prefix_len;
        Ok(if prefix == 0 || prefix > 128 {
            KernelConfig::default().v6_prefix_len
        } else {
            prefix
        })
    }

    /// Writes ceilings, ports, prefix and flags from the validated `[kernel]` section. The list
    /// flags come from the tries themselves (they persist across restarts in their pins).
    pub fn write_config(&self, settings: &KernelSettings) -> Result<(), KernelError> {
        self.write_ports(&settings.protected_ports)?;
        let mut cfg = KernelConfig {
            ceiling_burst: [0; TIER_COUNT],
            ceiling_per_sec: [0; TIER_COUNT],
            v6_prefix_len: u32::from(settings.ipv6_prefix).clamp(1, 128),
            flags: 0,
            sample_every: settings.event_sample_every,
            _reserved: 0,
        };
        for (i, c) in settings.ceilings.iter().enumerate() {
            cfg.ceiling_burst[i] = c.burst;
            cfg.ceiling_per_sec[i] = c.per_second;
        }
        if settings.lock_all_ports {
            cfg.flags |= FLAG_LOCK_ALL_PORTS;
        }
        let has_allow = !self.allow_is_empty();
        let has_deny = !self.deny_is_empty();
        let mut config = self.config.write();
        cfg.flags |= list_flags(has_allow, has_deny);
        config
            .set(0, cfg, 0)
            .map_err(|e| KernelError::map_op("writing", MAP_CONFIG, e))
    }

    fn write_ports(&self, protected: &[u16]) -> Result<(), KernelError> {
        let mut want = vec![false; 65536];
        for p in protected {
            want[usize::from(*p)] = true;
        }
        let mut ports = self.ports.write();
        // Only changed entries are written, so a restart with the same config is a read pass.
        for (port, want) in (0u32..).zip(want) {
            let res = match ports.get(&port, 0) {
                Ok(cur) if (cur != 0) == want => Ok(()),
                Ok(_) => ports.set(port, PortMark::from(want), 0),
                Err(e) => Err(e),
            };
            if let Err(e) = res {
                // The array may be smaller than 65536 in a custom build: ports past it cannot be
                // protected, which only matters if one was asked for.
                if matches!(e, aya::maps::MapError::OutOfBounds { .. }) && !want {
                    break;
                }
                return Err(KernelError::map_op("writing", MAP_PORTS, e));
            }
        }
        Ok(())
    }

    /// Ports marked protected in the kernel, ascending.
    pub fn protected_ports(&self) -> Result<Vec<u16>, KernelError> {
        let ports = self.ports.read();
        let mut out = Vec::new();
        for port in 0..ports.len().min(65536) {
            let mark = ports
                .get(&port, 0)
                .map_err(|e| KernelError::map_op("reading", MAP_PORTS, e))?;
            if mark != 0 {
                out.push(port as u16);
            }
        }
        Ok(out)
    }

    /// Keeps `FLAG_HAS_ALLOW`/`FLAG_HAS_DENY` equal to "the trie has entries", so the program
    /// skips empty tries without a lookup.
    fn sync_list_flags(&self) -> Result<(), KernelError> {
        let has_allow = !self.allow_is_empty();
        let has_deny = !self.deny_is_empty();
        let mut config = self.config.write();
        let mut cfg = config
            .get(&0, 0)
            .map_err(|e| KernelError::map_op("reading", MAP_CONFIG, e))?;
        let flags =
            (cfg.flags & !(FLAG_HAS_ALLOW | FLAG_HAS_DENY)) | list_flags(has_allow, has_deny);
        if flags == cfg.flags {
            return Ok(());
        }
        if cfg.v6_prefix_len == 0 {
            // Never written by a daemon: start from the program's defaults so that setting a flag
            // does not also zero every ceiling.
            cfg = KernelConfig::default();
        }
        cfg.flags =
            (cfg.flags & !(FLAG_HAS_ALLOW | FLAG_HAS_DENY)) | list_flags(has_allow, has_deny);
        config
            .set(0, cfg, 0)
            .map_err(|e| KernelError::map_op("writing", MAP_CONFIG, e))
    }

    // ---- lockouts -----------------------------------------------------------------------------

    /// Locks `ip` out for `duration` at `level`; returns the kernel-clock deadline written.
    pub fn lock(&self, ip: IpAddr, duration: Duration, level: u32) -> Result<u64, KernelError> {
        let deadline_ns = clock::deadline_after(duration)?;
        self.lock_until(ip, deadline_ns, level)?;
        Ok(deadline_ns)
    }

    /// Locks `ip` until `deadline_ns` (`CLOCK_BOOTTIME`), e.g. restoring a lockout from a store.
    pub fn lock_until(&self, ip: IpAddr, deadline_ns: u64, level: u32) -> Result<(), KernelError> {
        let key = ip_key(ip, self.v6_prefix()?);
        let value = Lockout {
            deadline_ns,
            level,
            _reserved: 0,
        };
        self.lockout
            .lock(key, value, |e, map| full_or(e, "writing", MAP_LOCKOUT, map))
    }

    /// Lifts a lockout; `false` when there was none.
    pub fn unlock(&self, ip: IpAddr) -> Result<bool, KernelError> {
        let key = ip_key(ip, self.v6_prefix()?);
        self.lockout.unlock(&key)
    }

    /// Makes the lockout cache consistent with the lockout hash (see
    /// [`LockoutTable::rebuild`]); the dataplane runs it before attaching.
    pub fn rebuild_lockout_cache(&self) -> Result<(), KernelError> {
        self.lockout.rebuild()
    }

    /// The kernel's lockout for `ip`, if any (expired ones included, with `remaining: None`).
    pub fn lockout(&self, ip: IpAddr) -> Result<Option<LockoutView>, KernelError> {
        let key = ip_key(ip, self.v6_prefix()?);
        let now = clock::boot_ns()?;
        match self.lockout.hash().get(&key, 0) {
            Ok(l) => Ok(Some(LockoutView {
                ip: key_ip(&key),
                level: l.level,
                remaining: clock::remaining(l.deadline_ns, now),
            })),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(KernelError::map_op("reading", MAP_LOCKOUT, e)),
        }
    }

    /// Every lockout in the kernel map.
    pub fn lockouts(&self) -> Result<Vec<LockoutView>, KernelError> {
        let now = clock::boot_ns()?;
        let map = self.lockout.hash();
        let mut out = Vec::new();
        for item in map.iter() {
            let (key, l) = item.map_err(|e| KernelError::map_op("listing", MAP_LOCKOUT, e))?;
            out.push(LockoutView {
                ip: key_ip(&key),
                level: l.level,
                remaining: clock::remaining(l.deadline_ns, now),
            });
        }
        Ok(out)
    }

    // ---- tiers --------------------------------------------------------------------------------

    /// Records a verified tier (`limiter_common::config::TIER_*`) for `ip` until `ttl` from now.
    pub fn set_tier(&self, ip: IpAddr, tier: u32, ttl: Duration) -> Result<(), KernelError> {
        let key = ip_key(ip, self.v6_prefix()?);
        let value = TierEntry {
            expires_ns: clock::deadline_after(ttl)?,
            tier,
            _reserved: 0,
        };
        // LRU map: a full map evicts the least recently used tier, which is the right loss.
        self.tier
            .write()
            .insert(key, value, 0)
            .map_err(|e| KernelError::map_op("writing", MAP_TIER, e))
    }

    /// Forgets `ip`'s tier (it falls back to the anonymous ceiling).
    pub fn clear_tier(&self, ip: IpAddr) -> Result<bool, KernelError> {
        let key = ip_key(ip, self.v6_prefix()?);
        match self.tier.write().remove(&key) {
            Ok(()) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(KernelError::map_op("removing from", MAP_TIER, e)),
        }
    }

    /// The tier the kernel holds for `ip` and whether it is still valid.
    pub fn tier(&self, ip: IpAddr) -> Result<Option<(u32, bool)>, KernelError> {
        let key = ip_key(ip, self.v6_prefix()?);
        match self.tier.read().get(&key, 0) {
            Ok(t) => Ok(Some((t.tier, t.expires_ns > clock::boot_ns()?))),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(KernelError::map_op("reading", MAP_TIER, e)),
        }
    }

    // ---- allow / deny lists -------------------------------------------------------------------

    pub fn allow_add(&self, net: IpNet) -> Result<(), KernelError> {
        {
            let mut map = self.allow.write();
            map.insert(&cidr_key(net), AllowMark::from(1u8), 0)
                .map_err(|e| full_or_trie(e, "writing", MAP_ALLOW, map.map_capacity()))?;
        }
        self.sync_list_flags()
    }

    pub fn allow_remove(&self, net: IpNet) -> Result<bool, KernelError> {
        let removed = remove_cidr(&mut self.allow.write(), net, MAP_ALLOW)?;
        self.sync_list_flags()?;
        Ok(removed)
    }

    pub fn allow_list(&self) -> Result<Vec<IpNet>, KernelError> {
        let map = self.allow.read();
        let mut out = Vec::new();
        for key in map.keys() {
            let key = key.map_err(|e| KernelError::map_op("listing", MAP_ALLOW, e))?;
            out.extend(key_cidr(&key));
        }
        Ok(out)
    }

    /// Denies `net`, for `duration` or (None) until removed.
    pub fn deny_add(&self, net: IpNet, duration: Option<Duration>) -> Result<(), KernelError> {
        let deadline_ns = match duration {
            Some(d) => clock::deadline_after(d)?,
            None => 0,
        };
        {
            let mut map = self.deny.write();
            map.insert(&cidr_key(net), DenyEntry { deadline_ns }, 0)
                .map_err(|e| full_or_trie(e, "writing", MAP_DENY, map.map_capacity()))?;
        }
        self.sync_list_flags()
    }

    pub fn deny_remove(&self, net: IpNet) -> Result<bool, KernelError> {
        let removed = remove_cidr(&mut self.deny.write(), net, MAP_DENY)?;
        self.sync_list_flags()?;
        Ok(removed)
    }

    pub fn deny_list(&self) -> Result<Vec<DenyView>, KernelError> {
        let now = clock::boot_ns()?;
        let map = self.deny.read();
        let mut out = Vec::new();
        for item in map.iter() {
            let (key, entry) = item.map_err(|e| KernelError::map_op("listing", MAP_DENY, e))?;
            let Some(cidr) = key_cidr(&key) else { continue };
            let (remaining, expired) = if entry.deadline_ns == 0 {
                (None, false)
            } else {
                let left = clock::remaining(entry.deadline_ns, now);
                (left, left.is_none())
            };
            out.push(DenyView {
                cidr,
                remaining,
                expired,
            });
        }
        Ok(out)
    }

    fn allow_is_empty(&self) -> bool {
        self.allow.read().keys().next().is_none()
    }

    fn deny_is_empty(&self) -> bool {
        self.deny.read().keys().next().is_none()
    }

    // ---- housekeeping -------------------------------------------------------------------------

    /// Removes expired lockouts and deny entries. The lockout map is a plain hash (so a flood
    /// cannot evict a ban), which means nothing else ever frees its slots.
    pub fn sweep_expired(&self) -> Result<Swept, KernelError> {
        let now = clock::boot_ns()?;
        let mut swept = Swept {
            lockouts: self.lockout.sweep(now)?,
            denies: 0,
        };
        let expired: Vec<Key<CidrBytes>> = self
            .deny
            .read()
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, d)| d.deadline_ns != 0 && d.deadline_ns <= now)
            .map(|(k, _)| k)
            .collect();
        for key in &expired {
            let mut map = self.deny.write();
            match map.get(key, 0) {
                Ok(d) if d.deadline_ns != 0 && d.deadline_ns <= now => {}
                _ => continue,
            }
            match map.remove(key) {
                Ok(()) => swept.denies += 1,
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(KernelError::map_op("removing from", MAP_DENY, e)),
            }
        }
        if swept.denies > 0 {
            self.sync_list_flags()?;
        }
        Ok(swept)
    }

    // ---- observation --------------------------------------------------------------------------

    /// Verdict counters summed over CPUs.
    pub fn counters(&self) -> Result<Counters, KernelError> {
        let mut out = [0u64; verdict::COUNT as usize];
        for (i, slot) in (0u32..).zip(out.iter_mut()) {
            match self.counters.get(&i, 0) {
                Ok(per_cpu) => *slot = per_cpu.iter().copied().fold(0u64, u64::wrapping_add),
                Err(aya::maps::MapError::OutOfBounds { .. }) => break,
                Err(e) => return Err(KernelError::map_op("reading", MAP_COUNTERS, e)),
            }
        }
        Ok(Counters(out))
    }

    /// Entries used against capacity, for the maps that fill up.
    pub fn fill(&self) -> Result<Vec<MapFill>, KernelError> {
        let count_err = |name| move |e| KernelError::map_op("counting", name, e);
        let lockout = self.lockout.hash();
        let tier = self.tier.read();
        let allow = self.allow.read();
        let deny = self.deny.read();
        Ok(vec![
            MapFill {
                name: MAP_LOCKOUT,
                entries: count(lockout.keys()).map_err(count_err(MAP_LOCKOUT))?,
                capacity: lockout.map_capacity(),
            },
            MapFill {
                name: MAP_TIER,
                entries: count(tier.keys()).map_err(count_err(MAP_TIER))?,
                capacity: tier.map_capacity(),
            },
            MapFill {
                name: MAP_BUCKET,
                entries: count(self.bucket.keys()).map_err(count_err(MAP_BUCKET))?,
                capacity: self.bucket.map_capacity(),
            },
            MapFill {
                name: MAP_ALLOW,
                entries: count(allow.keys()).map_err(count_err(MAP_ALLOW))?,
                capacity: allow.map_capacity(),
            },
            MapFill {
                name: MAP_DENY,
                entries: count(deny.keys()).map_err(count_err(MAP_DENY))?,
                capacity: deny.map_capacity(),
            },
        ])
    }
}

fn list_flags(has_allow: bool, has_deny: bool) -> u32 {
    let mut flags = 0;
    if has_allow {
        flags |= FLAG_HAS_ALLOW;
    }
    if has_deny {
        flags |= FLAG_HAS_DENY;
    }
    flags
}

fn count<K>(
    keys: impl Iterator<Item = Result<K, aya::maps::MapError>>,
) -> Result<u32, aya::maps::MapError> {
    let mut n = 0u32;
    for k in keys {
        k?;
        n = n.saturating_add(1);
    }
    Ok(n)
}

fn remove_cidr<V: aya::Pod>(
    map: &mut LpmTrie<MapData, CidrBytes, V>,
    net: IpNet,
    name: &'static str,
) -> Result<bool, KernelError> {
    match map.remove(&cidr_key(net)) {
        Ok(()) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(KernelError::map_op("removing from", name, e)),
    }
}

/// Capacity of a map, from the kernel's own description of it.
trait Capacity {
    fn map_capacity(&self) -> u32;
}

impl<K: aya::Pod, V: aya::Pod> Capacity for HashMap<MapData, K, V> {
    fn map_capacity(&self) -> u32 {
        use aya::maps::IterableMap;
        self.map().info().map(|i| i.max_entries()).unwrap_or(0)
    }
}

impl<K: aya::Pod, V: aya::Pod> Capacity for LpmTrie<MapData, K, V> {
    fn map_capacity(&self) -> u32 {
        use aya::maps::IterableMap;
        self.map().info().map(|i| i.max_entries()).unwrap_or(0)
    }
}

fn full_or(
    e: aya::maps::MapError,
    op: &'static str,
    name: &'static str,
    map: &HashMap<MapData, IpKey, Lockout>,
) -> KernelError {
    if is_full(&e) {
        KernelError::MapFull {
            name,
            capacity: map.map_capacity(),
        }
    } else {
        KernelError::map_op(op, name, e)
    }
}

fn full_or_trie(
    e: aya::maps::MapError,
    op: &'static str,
    name: &'static str,
    capacity: u32,
) -> KernelError {
    if is_full(&e)
        || matches!(&e, aya::maps::MapError::SyscallError(s) if s.io_error.raw_os_error() == Some(libc::ENOSPC))
    {
        KernelError::MapFull { name, capacity }
    } else {
        KernelError::map_op(op, name, e)
    }
}

/// These load the real object into a private pin directory (no interface is touched) and drive
/// the pinned maps. They need root and the built object: skipped outside CI, fatal under CI.
#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use limiter_common::config::{FLAG_HAS_ALLOW, FLAG_HAS_DENY, FLAG_LOCK_ALL_PORTS};
    use limiter_common::lockout_cache::{lockout_slot, overflow_bit};
    use limiter_common::LockoutSlot;

    use super::*;
    use crate::kernel::{loader, object};

    struct Pinned {
        layout: PinLayout,
        _ebpf: aya::Ebpf,
    }

    impl Drop for Pinned {
        fn drop(&mut self) {
            if let Err(e) = loader::detach(&self.layout) {
                eprintln!("cleanup of {}: {e}", self.layout.root().display());
            }
        }
    }

    fn pinned() -> Option<Pinned> {
        let in_ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let object = object::find_object();
        if !root || object.is_err() {
            assert!(
                !in_ci,
                "CI=true: these tests need root and the built eBPF object"
            );
            eprintln!("SKIP: needs root and the eBPF object (`cargo xtask build-ebpf`)");
            return None;
        }
        static N: AtomicU32 = AtomicU32::new(0);
        let layout = PinLayout::new(format!(
            "/sys/fs/bpf/limiter-unit-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let ebpf = loader::load(&object.unwrap(), &layout).expect("loading the object");
        Some(Pinned {
            layout,
            _ebpf: ebpf,
        })
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn config_is_written_and_list_flags_follow_the_tries() {
        let Some(p) = pinned() else { return };
        let maps = KernelMaps::open(&p.layout).unwrap();
        assert_eq!(
            maps.read_config().unwrap().v6_prefix_len,
            0,
            "fresh map is zeroed"
        );
        let mut settings = KernelSettings {
            protected_ports: vec![443, 8080],
            lock_all_ports: true,
            ipv6_prefix: 56,
            ..KernelSettings::default()
        };
        settings.ceilings[1].burst = 77;
        maps.write_config(&settings).unwrap();
        let cfg = maps.read_config().unwrap();
        assert_eq!(cfg.v6_prefix_len, 56);
        assert_eq!(cfg.ceiling_burst[1], 77);
        assert_eq!(cfg.flags, FLAG_LOCK_ALL_PORTS);
        assert_eq!(maps.protected_ports().unwrap(), vec![443, 8080]);

        maps.allow_add("10.0.0.0/8".parse().unwrap()).unwrap();
        assert_eq!(
            maps.read_config().unwrap().flags,
            FLAG_LOCK_ALL_PORTS | FLAG_HAS_ALLOW
        );
        maps.deny_add("2001:db8::/32".parse().unwrap(), None)
            .unwrap();
        assert_eq!(
            maps.read_config().unwrap().flags,
            FLAG_LOCK_ALL_PORTS | FLAG_HAS_ALLOW | FLAG_HAS_DENY
        );
        assert_eq!(
            maps.allow_list().unwrap(),
            vec!["10.0.0.0/8".parse::<IpNet>().unwrap()]
        );
        assert!(maps.allow_remove("10.0.0.0/8".parse().unwrap()).unwrap());
        assert!(!maps.allow_remove("10.0.0.0/8".parse().unwrap()).unwrap());
        assert_eq!(
            maps.read_config().unwrap().flags,
            FLAG_LOCK_ALL_PORTS | FLAG_HAS_DENY
        );

        // Rewriting the config keeps the list flags (the tries persist across restarts).
        settings.protected_ports = vec![80];
        maps.write_config(&settings).unwrap();
        assert_eq!(
            maps.read_config().unwrap().flags,
            FLAG_LOCK_ALL_PORTS | FLAG_HAS_DENY
        );
        assert_eq!(maps.protected_ports().unwrap(), vec![80]);
        assert!(maps.deny_remove("2001:db8::/32".parse().unwrap()).unwrap());
        assert_eq!(maps.read_config().unwrap().flags, FLAG_LOCK_ALL_PORTS);
    }

    #[test]
    fn lockouts_are_keyed_like_the_kernel_and_expire() {
        let Some(p) = pinned() else { return };
        let maps = KernelMaps::open(&p.layout).unwrap();
        let before = clock::boot_ns().unwrap();
        let deadline = maps
            .lock(ip("192.0.2.7"), Duration::from_secs(600), 3)
            .unwrap();
        assert!(deadline >= before + 600_000_000_000);
        // The v4-mapped spelling is the same key.
        let view = maps
            .lockout(ip("::ffff:192.0.2.7"))
            .unwrap()
            .expect("locked");
        assert_eq!(view.level, 3);
        assert!(view.remaining.unwrap() > Duration::from_secs(590));
        // IPv6: the whole /64 (the kernel's default prefix until a config is written) shares it.
        maps.lock(ip("2001:db8:1:2::1"), Duration::from_secs(60), 1)
            .unwrap();
        assert!(maps.lockout(ip("2001:db8:1:2:ffff::9")).unwrap().is_some());
        assert!(maps.lockout(ip("2001:db8:1:3::1")).unwrap().is_none());
        // An already-expired lockout is reported as such and swept.
        maps.lock_until(ip("198.51.100.1"), before, 1).unwrap();
        assert_eq!(
            maps.lockout(ip("198.51.100.1")).unwrap().unwrap().remaining,
            None
        );
        let fill = maps.fill().unwrap();
        assert_eq!(
            fill.iter().find(|f| f.name == MAP_LOCKOUT).unwrap().entries,
            3
        );
        assert_eq!(
            maps.sweep_expired().unwrap(),
            Swept {
                lockouts: 1,
                denies: 0
            }
        );
        assert!(maps.lockout(ip("198.51.100.1")).unwrap().is_none());
        assert!(maps.unlock(ip("192.0.2.7")).unwrap());
        assert!(!maps.unlock(ip("192.0.2.7")).unwrap());
        assert_eq!(maps.lockouts().unwrap().len(), 1);
    }

    /// An IPv4 address other than `ip` whose key shares `ip`'s lockout-cache slot.
    fn collider(ip: IpAddr, from: u32) -> IpAddr {
        let want = lockout_slot(&ip_key(ip, 64));
        (from..)
            .map(|n| IpAddr::from(std::net::Ipv4Addr::from(n)))
            .find(|c| *c != ip && lockout_slot(&ip_key(*c, 64)) == want)
            .unwrap()
    }

    fn assert_consistent(maps: &KernelMaps, when: &str) {
        let v = maps.lockout.violations().unwrap();
        assert!(v.is_empty(), "after {when}: {v:#?}");
    }

    #[test]
    fn lockout_cache_follows_lock_unlock_and_sweep() {
        let Some(p) = pinned() else { return };
        let maps = KernelMaps::open(&p.layout).unwrap();
        let a = ip("192.0.2.40");
        let b = collider(a, 0xc633_6400);
        // Searched from above b, so c is a third key.
        let c = collider(a, 0xcb00_7100);
        let ka = ip_key(a, 64);
        let slot = |ip| maps.lockout.slot_of(&ip_key(ip, 64)).unwrap().unwrap();

        let da = maps.lock(a, Duration::from_secs(600), 1).unwrap();
        assert_eq!(
            (slot(a).key, slot(a).deadline_ns, slot(a).flags),
            (ka, da, 0)
        );
        assert_consistent(&maps, "locking a");
        // b collides: a keeps the slot, b lives in the hash, the slot has b's overflow bit.
        let kb_bit = overflow_bit(&ip_key(b, 64));
        maps.lock(b, Duration::from_secs(600), 2).unwrap();
        assert_eq!((slot(a).key, slot(a).flags), (ka, kb_bit));
        assert_consistent(&maps, "locking b");
        // Re-locking the occupant updates the copy.
        let da2 = maps.lock(a, Duration::from_secs(900), 3).unwrap();
        assert_eq!((slot(a).deadline_ns, slot(a).level), (da2, 3));
        assert_consistent(&maps, "re-locking a");
        // Unlocking the occupant vacates the slot; the filter stays for b.
        assert!(maps.unlock(a).unwrap());
        assert!(!slot(a).is_occupied());
        assert!(slot(a).overflowed());
        assert_consistent(&maps, "unlocking a");
        // c takes the vacated slot (a is gone), the filter still covers b.
        maps.lock(c, Duration::from_secs(600), 1).unwrap();
        assert_eq!((slot(a).key, slot(a).flags), (ip_key(c, 64), kb_bit));
        assert_consistent(&maps, "locking c");
        // b expires; the sweep removes it and repairs the slot: no key overflows any more.
        maps.lock_until(b, 1, 2).unwrap();
        assert_consistent(&maps, "expiring b");
        assert_eq!(maps.sweep_expired().unwrap().lockouts, 1);
        assert_eq!((slot(a).key, slot(a).flags), (ip_key(c, 64), 0));
        assert_consistent(&maps, "the sweep");
        // The occupant expires and is swept: its slot is vacated.
        maps.lock_until(c, 1, 1).unwrap();
        assert_eq!(maps.sweep_expired().unwrap().lockouts, 1);
        assert_eq!(slot(a), LockoutSlot::default());
        assert_consistent(&maps, "sweeping the occupant");
        assert!(maps.lockouts().unwrap().is_empty());
    }

    #[test]
    fn lockout_cache_is_rebuilt_from_a_hash_written_without_it() {
        let Some(p) = pinned() else { return };
        let maps = KernelMaps::open(&p.layout).unwrap();
        let a = ip("192.0.2.50");
        let b = collider(a, 0xc633_6400);
        let lone = ip("203.0.113.9");
        // What a build without the cache left behind: hash entries only.
        {
            let mut hash: HashMap<MapData, IpKey, Lockout> = open(&p.layout, MAP_LOCKOUT).unwrap();
            for (ip, level) in [(a, 1), (b, 2), (lone, 3)] {
                let l = Lockout {
                    deadline_ns: clock::deadline_after(Duration::from_secs(60)).unwrap(),
                    level,
                    _reserved: 0,
                };
                hash.insert(ip_key(ip, 64), l, 0).unwrap();
            }
        }
        assert_eq!(maps.lockout.violations().unwrap().len(), 3);
        maps.rebuild_lockout_cache().unwrap();
        assert_consistent(&maps, "the rebuild");
        let slot = maps.lockout.slot_of(&ip_key(a, 64)).unwrap().unwrap();
        assert_eq!(
            slot.flags.count_ones(),
            1,
            "one of a and b overflowed: {slot:?}"
        );
        let lone_slot = maps.lockout.slot_of(&ip_key(lone, 64)).unwrap().unwrap();
        assert_eq!(
            (lone_slot.key, lone_slot.level, lone_slot.flags),
            (ip_key(lone, 64), 3, 0)
        );
        // A slot left holding a key the hash no longer has is vacated.
        {
            let mut hash: HashMap<MapData, IpKey, Lockout> = open(&p.layout, MAP_LOCKOUT).unwrap();
            hash.remove(&ip_key(lone, 64)).unwrap();
        }
        assert_eq!(maps.lockout.violations().unwrap().len(), 1);
        maps.rebuild_lockout_cache().unwrap();
        assert_consistent(&maps, "the second rebuild");
        assert!(!maps
            .lockout
            .slot_of(&ip_key(lone, 64))
            .unwrap()
            .unwrap()
            .is_occupied());
    }

    #[test]
    fn expired_deny_entries_are_swept_and_the_flag_cleared() {
        let Some(p) = pinned() else { return };
        let maps = KernelMaps::open(&p.layout).unwrap();
        maps.write_config(&KernelSettings::default()).unwrap();
        maps.deny_add(
            "203.0.113.0/24".parse().unwrap(),
            Some(Duration::from_nanos(1)),
        )
        .unwrap();
        maps.deny_add(
            "198.51.100.0/24".parse().unwrap(),
            Some(Duration::from_secs(3600)),
        )
        .unwrap();
        let list = maps.deny_list().unwrap();
        assert_eq!(list.len(), 2);
        assert!(list
            .iter()
            .any(|d| d.expired && d.cidr.to_string() == "203.0.113.0/24"));
        assert_eq!(maps.sweep_expired().unwrap().denies, 1);
        assert_eq!(
            maps.read_config().unwrap().flags & FLAG_HAS_DENY,
            FLAG_HAS_DENY
        );
        assert!(maps
            .deny_remove("198.51.100.0/24".parse().unwrap())
            .unwrap());
        assert_eq!(maps.read_config().unwrap().flags & FLAG_HAS_DENY, 0);
    }

    #[test]
    fn tiers_and_counters() {
        let Some(p) = pinned() else { return };
        let maps = KernelMaps::open(&p.layout).unwrap();
        maps.set_tier(ip("192.0.2.9"), 2, Duration::from_secs(60))
            .unwrap();
        assert_eq!(maps.tier(ip("192.0.2.9")).unwrap(), Some((2, true)));
        maps.set_tier(ip("192.0.2.10"), 1, Duration::ZERO).unwrap();
        assert_eq!(maps.tier(ip("192.0.2.10")).unwrap(), Some((1, false)));
        assert!(maps.clear_tier(ip("192.0.2.9")).unwrap());
        assert_eq!(maps.tier(ip("192.0.2.9")).unwrap(), None);
        // Nothing is attached, so no packet was counted.
        assert!(maps.counters().unwrap().0.iter().all(|c| *c == 0));
    }

    #[test]
    fn allow_flag_from_a_fresh_map_keeps_program_defaults() {
        let Some(p) = pinned() else { return };
        let maps = KernelMaps::open(&p.layout).unwrap();
        maps.allow_add("192.0.2.0/24".parse().unwrap()).unwrap();
        let cfg = maps.read_config().unwrap();
        let defaults = KernelConfig::default();
        assert_eq!(cfg.ceiling_burst, defaults.ceiling_burst);
        assert_eq!(cfg.v6_prefix_len, defaults.v6_prefix_len);
        assert_eq!(cfg.flags, FLAG_HAS_ALLOW);
    }
}
