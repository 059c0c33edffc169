//! The `[kernel]` section: whether and how the XDP/TC dataplane is attached, and its numbers.

use std::path::PathBuf;
use std::time::Duration;

use limiter_common::config::{MAX_PER_SEC, TIER_COUNT};
use serde::Deserialize;

use super::ConfigError;
use crate::model::duration_text::{self, Units};

/// Whether the daemon needs the kernel dataplane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KernelMode {
    /// Attach when possible; otherwise run userspace-only and say so loudly.
    Auto,
    /// Failing to attach is fatal.
    Required,
    /// Never touch the kernel.
    Off,
}

/// How the program is attached to each interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum AttachMode {
    /// Native XDP, falling back to generic (skb) XDP.
    #[serde(rename = "auto")]
    Auto,
    #[serde(rename = "xdp")]
    Xdp,
    #[serde(rename = "xdp-skb")]
    XdpSkb,
    /// clsact/TCX ingress classifier.
    #[serde(rename = "tc")]
    Tc,
}

#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCeiling {
    pub burst: u32,
    pub per_second: u32,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCeilings {
    pub anon: Option<RawCeiling>,
    pub session: Option<RawCeiling>,
    pub sponsor: Option<RawCeiling>,
    pub crawler: Option<RawCeiling>,
    pub agent: Option<RawCeiling>,
}

/// `[kernel]` as written in the file; every field optional with a documented default.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKernel {
    pub mode: Option<KernelMode>,
    pub attach: Option<AttachMode>,
    pub interfaces: Option<Vec<String>>,
    pub pin_path: Option<PathBuf>,
    pub protected_ports: Option<Vec<u16>>,
    pub lock_all_ports: Option<bool>,
    pub event_sample_every: Option<u32>,
    /// How long a verified tier stays in the kernel's tier map after the IP was last seen.
    pub tier_ttl: Option<String>,
    pub ceiling: Option<RawCeilings>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ceiling {
    pub burst: u32,
    pub per_second: u32,
}

/// The validated `[kernel]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSettings {
    pub mode: KernelMode,
    pub attach: AttachMode,
    pub interfaces: Vec<String>,
    pub pin_path: PathBuf,
    pub protected_ports: Vec<u16>,
    pub lock_all_ports: bool,
    pub event_sample_every: u32,
    pub tier_ttl: Duration,
    /// Indexed by `limiter_common::config::TIER_*`.
    pub ceilings: [Ceiling; TIER_COUNT],
    /// IPv6 sources are grouped by this prefix (shared with identity grouping).
    pub ipv6_prefix: u8,
}

pub const DEFAULT_PIN_PATH: &str = "/sys/fs/bpf/limiter";

impl Default for KernelSettings {
    fn default() -> Self {
        KernelSettings::validate(RawKernel::default(), 64).expect("defaults are valid")
    }
}

impl KernelSettings {
    pub fn validate(raw: RawKernel, ipv6_prefix: u8) -> Result<Self, ConfigError> {
        let defaults = limiter_common::KernelConfig::default();
        let ceiling =
            |name: &str, idx: usize, c: Option<RawCeiling>| -> Result<Ceiling, ConfigError> {
                let c = c.unwrap_or(RawCeiling {
                    burst: defaults.ceiling_burst[idx],
                    per_second: defaults.ceiling_per_sec[idx],
                });
                if c.burst == 0 {
                    return Err(ConfigError::invalid(
                        format!("kernel.ceiling.{name}.burst"),
                        "must be at least 1",
                    ));
                }
                if c.per_second == 0 || c.per_second > MAX_PER_SEC {
                    return Err(ConfigError::invalid(
                        format!("kernel.ceiling.{name}.per_second"),
                        format!("must be between 1 and {MAX_PER_SEC}"),
                    ));
                }
                Ok(Ceiling {
                    burst: c.burst,
                    per_second: c.per_second,
                })
            };
        let raw_ceilings = raw.ceiling.unwrap_or(RawCeilings {
            anon: None,
            session: None,
            sponsor: None,
            crawler: None,
            agent: None,
        });
        let ceilings = [
            ceiling("anon", 0, raw_ceilings.anon)?,
            ceiling("session", 1, raw_ceilings.session)?,
            ceiling("sponsor", 2, raw_ceilings.sponsor)?,
            ceiling("crawler", 3, raw_ceilings.crawler)?,
            ceiling("agent", 4, raw_ceilings.agent)?,
        ];
        let protected_ports = raw.protected_ports.unwrap_or_else(|| vec![80, 443]);
        if protected_ports.contains(&0) {
            return Err(ConfigError::invalid(
                "kernel.protected_ports",
                "port 0 is not a port",
            ));
        }
        let tier_ttl = match raw.tier_ttl {
            None => Duration::from_secs(3600),
            Some(s) => duration_text::parse(&s, Units::Config)
                .map_err(|e| ConfigError::invalid("kernel.tier_ttl", e.to_string()))?,
        };
        let interfaces = raw.interfaces.unwrap_or_default();
        if let Some(bad) = interfaces.iter().find(|i| i.is_empty() || i.len() > 15) {
            return Err(ConfigError::invalid(
                "kernel.interfaces",
                format!("{bad:?} is not an interface name (1 to 15 characters)"),
            ));
        }
        Ok(KernelSettings {
            mode: raw.mode.unwrap_or(KernelMode::Auto),
            attach: raw.attach.unwrap_or(AttachMode::Auto),
            interfaces,
            pin_path: raw
                .pin_path
                .unwrap_or_else(|| PathBuf::from(DEFAULT_PIN_PATH)),
            protected_ports,
            lock_all_ports: raw.lock_all_ports.unwrap_or(false),
            event_sample_every: raw.event_sample_every.unwrap_or(defaults.sample_every),
            tier_ttl,
            ceilings,
            ipv6_prefix,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_burst_names_the_field() {
        let raw: RawKernel =
            toml::from_str("[ceiling.session]\nburst = 0\nper_second = 1\n").unwrap();
        let err = KernelSettings::validate(raw, 64).unwrap_err().to_string();
        assert!(err.contains("kernel.ceiling.session.burst"), "{err}");
    }

    #[test]
    fn bad_duration_names_the_field() {
        let raw: RawKernel = toml::from_str("tier_ttl = \"soon\"\n").unwrap();
        let err = KernelSettings::validate(raw, 64).unwrap_err().to_string();
        assert!(err.contains("kernel.tier_ttl"), "{err}");
    }

    #[test]
    fn unknown_attach_mode_is_rejected() {
        assert!(toml::from_str::<RawKernel>("attach = \"fast\"\n").is_err());
    }
}
