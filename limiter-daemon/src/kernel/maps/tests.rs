//! Tests of [`KernelMaps`] on the real maps. They load the real object into a private pin
//! directory (no interface is touched) and drive the pinned maps. They need root and the built
//! object: skipped outside CI, fatal under CI.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use aya::maps::{HashMap, MapData};
use ipnet::IpNet;
use limiter_common::config::{FLAG_HAS_ALLOW, FLAG_HAS_DENY, FLAG_LOCK_ALL_PORTS};
use limiter_common::lockout_cache::{lockout_slot, overflow_bit};
use limiter_common::maps::MAP_LOCKOUT;
use limiter_common::{IpKey, KernelConfig, Lockout, LockoutSlot};

use super::handle::KernelMaps;
use super::open::open;
use super::sweep::Swept;
use crate::config::kernel::KernelSettings;
use crate::kernel::addr::ip_key;
use crate::kernel::pins::PinLayout;
use crate::kernel::{clock, loader, object};

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
