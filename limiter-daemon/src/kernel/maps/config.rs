//! The runtime config the program reads (`LIM_CONFIG`: ceilings, IPv6 prefix, flags, sampling)
//! and the protected-port array (`LIM_PORTS`), both written from the validated `[kernel]` section.
//! The list flags in the config are kept by [`super::list_flags`].

use aya::maps::MapError;
use limiter_common::config::{FLAG_LOCK_ALL_PORTS, TIER_COUNT};
use limiter_common::maps::{PortMark, MAP_CONFIG, MAP_PORTS};
use limiter_common::KernelConfig;

use super::handle::KernelMaps;
use super::list_flags::list_flags;
use crate::config::kernel::KernelSettings;
use crate::kernel::KernelError;

impl KernelMaps {
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
                if matches!(e, MapError::OutOfBounds { .. }) && !want {
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
}
