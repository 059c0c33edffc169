//! The three filters the receiver is measured with, each holding the same locked sources:
//!
//! - [`Kind::Xdp`]: this project's program, loaded and attached in native (driver) mode the way
//!   the daemon does it (`Dataplane::start_required`), the sources written with
//!   `KernelMaps::lock_until`; its `drop_locked` counter says what it dropped.
//! - [`Kind::NftInput`]: what CrowdSec's firewall bouncer installs in nftables mode (table `ip
//!   crowdsec`, chain `crowdsec-chain` on the **input** hook at priority -10, the set
//!   `crowdsec-blacklists` of `ipv4_addr` with `flags timeout`), and what fail2ban's nftables
//!   actions install (a set matched in an input-hook chain). A rule counter says what it dropped.
//! - [`Kind::NftIngress`]: the earliest nftables can drop, a `netdev` table on the device's
//!   ingress hook: not what either tool installs, measured so the comparison is with nftables at
//!   its best too.
//! - [`Kind::None`]: the receiver's stack answers (a listener on the port, SYN cookies once its
//!   queue is full).
//!
//! Every set is loaded with one `nft -f` file, however many sources. Each filter is removed when
//! its [`Installed`] drops, so one receiver is measured with each in turn.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use limiter_common::verdict;
use limiter_daemon::config::kernel::{AttachMode, KernelMode, KernelSettings};
use limiter_daemon::kernel::clock::deadline_after;
use limiter_daemon::kernel::dataplane::Dataplane;
use limiter_daemon::kernel::loader::detach;
use limiter_daemon::kernel::{AttachedMode, PinLayout};
use limiter_tests::netns::{run, unique_name};

use super::topology::Topology;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    None,
    NftInput,
    NftIngress,
    Xdp,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::None, Kind::NftInput, Kind::NftIngress, Kind::Xdp];

    pub fn label(self) -> &'static str {
        match self {
            Kind::None => "no filter",
            Kind::NftInput => "nft set, input hook",
            Kind::NftIngress => "nft set, netdev ingress",
            Kind::Xdp => "XDP (native)",
        }
    }
}

/// How long the filters hold the sources: far past any run.
const LOCK_FOR: Duration = Duration::from_secs(3600);

/// An installed filter; removed on drop.
pub enum Installed {
    None,
    Nft {
        netns: String,
        family: &'static str,
        table: &'static str,
        chain: &'static str,
    },
    Xdp {
        pins: PathBuf,
        dataplane: Box<Dataplane>,
    },
}

impl Installed {
    pub fn install(kind: Kind, topo: &Topology, locked: &[Ipv4Addr]) -> Self {
        match kind {
            Kind::None => Installed::None,
            // CrowdSec's firewall bouncer: its table, set and chain names, at the input hook.
            Kind::NftInput => nft_timed_set(
                topo,
                locked,
                ["ip", "crowdsec", "crowdsec-blacklists", "crowdsec-chain"],
                "input priority -10".to_string(),
            ),
            // The same set at netdev ingress, before the stack sees the packet.
            Kind::NftIngress => nft_timed_set(
                topo,
                locked,
                ["netdev", "flood", "locked", "ingress"],
                format!("ingress device \"{}\" priority -500", topo.receiver_if),
            ),
            Kind::Xdp => {
                let pins = PathBuf::from("/sys/fs/bpf").join(unique_name("limiter-flood-"));
                let settings = KernelSettings {
                    mode: KernelMode::Required,
                    attach: AttachMode::Xdp,
                    interfaces: vec![topo.receiver_if.clone()],
                    pin_path: pins.clone(),
                    protected_ports: vec![topo.port],
                    ..KernelSettings::default()
                };
                // Attached from inside the receiver's namespace, where its interface is.
                let started = topo.receiver.run(|| {
                    Dataplane::start_required(
                        &settings,
                        &tokio_util::sync::CancellationToken::new(),
                    )
                });
                let started = started.unwrap_or_else(|e| {
                    // A failed start rolls back its attachment; the maps it pinned go here.
                    remove_pins(&pins);
                    panic!("attaching XDP in native mode to {}: {e}", topo.receiver_if)
                });
                // Owned from here on, so a failed check below still detaches on unwinding.
                let installed = Installed::Xdp {
                    pins,
                    dataplane: Box::new(started),
                };
                let Installed::Xdp { dataplane, .. } = &installed else {
                    unreachable!("built just above")
                };
                let modes: Vec<AttachedMode> =
                    dataplane.attachments().iter().map(|a| a.mode).collect();
                assert_eq!(modes, [AttachedMode::Xdp], "native XDP, not generic");
                let until = deadline_after(LOCK_FOR).expect("reading CLOCK_BOOTTIME");
                for a in locked {
                    dataplane
                        .maps()
                        .lock_until(IpAddr::V4(*a), until, 1)
                        .unwrap_or_else(|e| panic!("locking {a}: {e}"));
                }
                installed
            }
        }
    }

    /// Packets this filter has dropped so far (`None` drops nothing).
    pub fn dropped(&self) -> u64 {
        match self {
            Installed::None => 0,
            Installed::Nft {
                netns,
                family,
                table,
                chain,
            } => {
                let json = run(Command::new("ip").args([
                    "netns", "exec", netns, "nft", "-j", "list", "chain", family, table, chain,
                ]));
                let v: serde_json::Value = serde_json::from_str(&json).expect("nft -j output");
                v["nftables"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|o| o["rule"]["expr"].as_array())
                    .flatten()
                    .filter_map(|e| e["counter"]["packets"].as_u64())
                    .sum()
            }
            Installed::Xdp { dataplane, .. } => dataplane
                .maps()
                .counters()
                .expect("reading the verdict counters")
                .get(verdict::DROP_LOCKED),
        }
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        match self {
            Installed::None => {}
            Installed::Nft {
                netns,
                family,
                table,
                ..
            } => {
                let out = Command::new("ip")
                    .args([
                        "netns", "exec", netns, "nft", "delete", "table", family, table,
                    ])
                    .output();
                if !out.as_ref().is_ok_and(|o| o.status.success()) {
                    eprintln!("removing nft table {family} {table} in {netns}: {out:?}");
                }
            }
            Installed::Xdp { pins, .. } => remove_pins(pins),
        }
    }
}

/// Detaches what is pinned under `pins` and removes the pins.
fn remove_pins(pins: &std::path::Path) {
    if let Err(e) = detach(&PinLayout::new(pins)) {
        eprintln!("detaching {}: {e}", pins.display());
    }
}

/// The set's `elements = { ... }` line (none for an empty set).
fn elements(locked: &[Ipv4Addr]) -> String {
    if locked.is_empty() {
        return String::new();
    }
    let list: Vec<String> = locked.iter().map(Ipv4Addr::to_string).collect();
    format!("\t\telements = {{ {} }}\n", list.join(", "))
}

/// Loads `ruleset` into the receiver's namespace with one `nft -f`.
/// Loads a table `[family, table, set, chain]` holding one set of `locked` sources with a
/// timeout, and one chain at `hook` that drops them, and says how to remove it.
fn nft_timed_set(
    topo: &Topology,
    locked: &[Ipv4Addr],
    [family, table, set, chain]: [&'static str; 4],
    hook: String,
) -> Installed {
    let ruleset = format!(
        "table {family} {table} {{\n\
         \tset {set} {{\n\t\ttype ipv4_addr\n\t\tflags timeout\n\
         \t\ttimeout {}s\n{}\t}}\n\
         \tchain {chain} {{\n\
         \t\ttype filter hook {hook}; policy accept;\n\
         \t\tip saddr @{set} counter drop\n\t}}\n}}\n",
        LOCK_FOR.as_secs(),
        elements(locked)
    );
    nft_load(topo, &ruleset);
    Installed::Nft {
        netns: topo.receiver.name().to_string(),
        family,
        table,
        chain,
    }
}

fn nft_load(topo: &Topology, ruleset: &str) {
    let file = tempfile::NamedTempFile::new().expect("a temporary file for the ruleset");
    std::fs::write(file.path(), ruleset).expect("writing the ruleset");
    run(Command::new("ip")
        .args(["netns", "exec", topo.receiver.name(), "nft", "-f"])
        .arg(file.path()));
}
