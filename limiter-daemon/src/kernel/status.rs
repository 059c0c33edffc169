//! `kernel status`: mode, interfaces, per-verdict counters, map fill and the config the kernel
//! reads, gathered from the pins alone (works with the daemon stopped).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use aya::programs::links::{FdLink, PinnedLink};
use limiter_common::config::{FLAG_HAS_ALLOW, FLAG_HAS_DENY, FLAG_LOCK_ALL_PORTS, TIER_COUNT};
use serde::Serialize;

use super::maps::{KernelMaps, MapFill};
use super::pins::{AttachedMode, PinLayout};
use super::KernelError;

#[derive(Clone, Debug, Serialize)]
pub struct InterfaceStatus {
    pub iface: String,
    pub mode: AttachedMode,
    pub link_id: Option<u32>,
    pub program_id: Option<u32>,
    pub program_name: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CeilingView {
    pub tier: &'static str,
    pub burst: u32,
    pub per_second: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct ConfigView {
    pub written: bool,
    pub ceilings: Vec<CeilingView>,
    pub protected_ports: Vec<u16>,
    pub v6_prefix: u32,
    pub lock_all_ports: bool,
    pub has_allow: bool,
    pub has_deny: bool,
    pub sample_every: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct KernelStatus {
    pub pin_path: PathBuf,
    /// `xdp`, `xdp-skb`, `tc`, several joined by `+`, or `detached`.
    pub mode: String,
    pub interfaces: Vec<InterfaceStatus>,
    /// Packets per verdict since the maps were created, summed over CPUs.
    pub counters: BTreeMap<&'static str, u64>,
    pub maps: Vec<MapFill>,
    pub config: ConfigView,
}

const TIER_NAMES: [&str; TIER_COUNT] = ["anon", "session", "sponsor", "crawler", "agent"];

/// Reads everything from the pins under `layout`.
pub fn gather(layout: &PinLayout, maps: &KernelMaps) -> Result<KernelStatus, KernelError> {
    let mut interfaces = Vec::new();
    for a in layout.attachments()? {
        let info = PinnedLink::from_pin(&a.path)
            .ok()
            .and_then(|p| FdLink::from(p).info().ok());
        let program_id = info.as_ref().map(|i| i.program_id());
        let program_name = program_id.and_then(|id| {
            aya::programs::loaded_programs()
                .filter_map(Result::ok)
                .find(|p| p.id() == id)
                .and_then(|p| p.name_as_str().map(str::to_string))
        });
        interfaces.push(InterfaceStatus {
            iface: a.iface,
            mode: a.mode,
            link_id: info.as_ref().map(|i| i.id()),
            program_id,
            program_name,
        });
    }
    let mut modes: Vec<&str> = interfaces.iter().map(|i| i.mode.as_str()).collect();
    modes.sort_unstable();
    modes.dedup();
    let mode = if modes.is_empty() {
        "detached".to_string()
    } else {
        modes.join("+")
    };
    let counters = maps.counters()?.named().collect();
    let cfg = maps.read_config()?;
    let config = ConfigView {
        written: cfg.v6_prefix_len != 0,
        ceilings: (0..TIER_COUNT)
            .map(|i| CeilingView {
                tier: TIER_NAMES[i],
                burst: cfg.ceiling_burst[i],
                per_second: cfg.ceiling_per_sec[i],
            })
            .collect(),
        protected_ports: maps.protected_ports()?,
        v6_prefix: cfg.v6_prefix_len,
        lock_all_ports: cfg.flags & FLAG_LOCK_ALL_PORTS != 0,
        has_allow: cfg.flags & FLAG_HAS_ALLOW != 0,
        has_deny: cfg.flags & FLAG_HAS_DENY != 0,
        sample_every: cfg.sample_every,
    };
    Ok(KernelStatus {
        pin_path: layout.root().to_path_buf(),
        mode,
        interfaces,
        counters,
        maps: maps.fill()?,
        config,
    })
}

impl KernelStatus {
    /// Human-readable rendering for the terminal.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "pin path:   {}", self.pin_path.display());
        let _ = writeln!(s, "mode:       {}", self.mode);
        for i in &self.interfaces {
            let _ = writeln!(
                s,
                "interface:  {} ({}) link {} program {} {}",
                i.iface,
                i.mode,
                i.link_id.map_or("?".into(), |v| v.to_string()),
                i.program_id.map_or("?".into(), |v| v.to_string()),
                i.program_name.as_deref().unwrap_or("")
            );
        }
        let c = &self.config;
        if c.written {
            let ceilings: Vec<String> = c
                .ceilings
                .iter()
                .map(|t| format!("{} {}+{}/s", t.tier, t.burst, t.per_second))
                .collect();
            let _ = writeln!(s, "ceilings:   {}", ceilings.join(", "));
            let _ = writeln!(
                s,
                "ports:      {}{}",
                c.protected_ports
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                if c.lock_all_ports {
                    " (lockouts cover all ports)"
                } else {
                    ""
                }
            );
            let _ = writeln!(s, "ipv6 /{}", c.v6_prefix);
        } else {
            let _ = writeln!(s, "config:     not written yet (program defaults apply)");
        }
        let _ = writeln!(s, "counters:");
        // Index order (the order packets flow through the checks), not alphabetical.
        for name in limiter_common::verdict::NAMES {
            let n = self.counters.get(name).copied().unwrap_or(0);
            let _ = writeln!(s, "  {name:<18} {n}");
        }
        let _ = writeln!(s, "maps:");
        for m in &self.maps {
            let _ = writeln!(s, "  {:<18} {} / {}", m.name, m.entries, m.capacity);
        }
        s
    }
}
