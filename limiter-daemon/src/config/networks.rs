//! `[networks]`: anonymous and session callers are also metered as their network, so a
//! crawler spread over many addresses is one caller there. Two levels, each with its own burst
//! and hourly budget: the address prefix (`[networks.prefix]`, IPv4 /24 and IPv6 /48 by
//! default) and, when `asn_table` names an iptoasn TSV file, the autonomous system
//! (`[networks.asn]`). Both are on by default at ten times the anonymous budgets: a /24 is then
//! metered like ten busy readers.
//!
//! Each rung metered by address has its own **share** of a network ([`NetworkSettings::share`]):
//! the level's budgets are the anonymous callers' share, and a rung's share is them scaled by
//! the rung's own budget over the anonymous one (by default, session callers share ten session
//! callers' worth). So signed-in callers spending their own budgets never use up what their
//! anonymous neighbours may send, and one caller spending its whole budget uses a tenth of its
//! rung's share; a forged cookie buys the session share and nothing else.
//!
//! `lockout` says what a network's burst strike locks: the addresses that sent in the
//! offending burst window (`"addresses"`, the default: a neighbour that sent nothing is never
//! locked by its network), or the whole prefix (`"prefix"`, opt-in).

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;

use super::asn::AsnTable;
use super::tiers::{TierLimits, TierTable, MAX_BURST};
use super::ConfigError;
use crate::model::{NetLevel, Tier};

/// What a level's budgets default to: this many anonymous callers' worth.
pub const DEFAULT_FACTOR: u32 = 10;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNetLevel {
    /// `false` turns the level off.
    pub enabled: Option<bool>,
    pub burst: Option<u32>,
    pub hourly: Option<u32>,
}

/// What a network's burst strike locks out (`[networks] lockout`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NetLockout {
    /// The (grouped) addresses that sent in the offending burst window, each through the same
    /// per-address lockout an address's own burst earns.
    #[default]
    Addresses,
    /// The whole prefix (or ASN range): a deny-list entry with a deadline.
    Prefix,
}

impl NetLockout {
    pub const ALL: [NetLockout; 2] = [NetLockout::Addresses, NetLockout::Prefix];

    pub fn as_str(self) -> &'static str {
        match self {
            NetLockout::Addresses => "addresses",
            NetLockout::Prefix => "prefix",
        }
    }

    /// `networks.lockout` from the file (absent: `addresses`); anything else names the field.
    fn parse(raw: Option<&str>) -> Result<NetLockout, ConfigError> {
        let Some(text) = raw else {
            return Ok(NetLockout::default());
        };
        NetLockout::ALL
            .into_iter()
            .find(|l| l.as_str() == text)
            .ok_or_else(|| {
                ConfigError::invalid(
                    "networks.lockout",
                    format!("{text:?} is not \"addresses\" or \"prefix\""),
                )
            })
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNetworks {
    /// IPv4 prefix length a network is (default 24).
    pub ipv4_prefix: Option<u8>,
    /// IPv6 prefix length a network is (default 48).
    pub ipv6_prefix: Option<u8>,
    /// An iptoasn TSV file (`ip2asn-combined.tsv`); absent: no ASN level.
    pub asn_table: Option<PathBuf>,
    /// The same table fetched on a schedule (`https://iptoasn.com/data/ip2asn-combined.tsv.gz`);
    /// instead of `asn_table`.
    pub asn_url: Option<String>,
    /// What a network's strike locks: `"addresses"` (default) or `"prefix"`.
    pub lockout: Option<String>,
    #[serde(default)]
    pub prefix: RawNetLevel,
    #[serde(default)]
    pub asn: RawNetLevel,
}

/// One level's budgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetBudget {
    /// Requests in any 60-second span from the whole network.
    pub burst: NonZeroU32,
    /// Units per UTC clock hour from the whole network.
    pub hourly: NonZeroU32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NetworkSettings {
    pub ipv4_prefix: u8,
    pub ipv6_prefix: u8,
    /// `None`: the level is off.
    pub prefix: Option<NetBudget>,
    /// `None`: the level is off, or no table is configured.
    pub asn: Option<NetBudget>,
    pub asn_table_path: Option<PathBuf>,
    /// Where the table is fetched from (`None`: read from `asn_table_path`, or no table).
    pub asn_url: Option<String>,
    /// The loaded table (shared: a reload loads a new one; with `asn_url`, the engine sets
    /// the last good download).
    pub asn_table: Option<Arc<AsnTable>>,
    /// What a network's burst strike locks out.
    pub lockout: NetLockout,
}

impl NetworkSettings {
    /// Validates `raw`; budgets default to [`DEFAULT_FACTOR`] × the anonymous tier's. Loads the
    /// ASN table when one is named (and its level is on).
    pub fn validate(raw: RawNetworks, tiers: &TierTable) -> Result<Self, ConfigError> {
        let ipv4_prefix = prefix_len("networks.ipv4_prefix", raw.ipv4_prefix, 24, 8, 32)?;
        let ipv6_prefix = prefix_len("networks.ipv6_prefix", raw.ipv6_prefix, 48, 16, 128)?;
        let lockout = NetLockout::parse(raw.lockout.as_deref())?;
        let prefix = budget(NetLevel::Prefix, raw.prefix, tiers)?;
        let asn_level = budget(NetLevel::Asn, raw.asn, tiers)?;
        let asn_url = raw
            .asn_url
            .as_deref()
            .map(|u| super::proof_sources::https_url("networks.asn_url", u))
            .transpose()?;
        if asn_url.is_some() && raw.asn_table.is_some() {
            return Err(ConfigError::invalid(
                "networks.asn_url",
                "set asn_url or asn_table, not both (asn_url keeps its own copy on disk)",
            ));
        }
        let asn_table = match (&raw.asn_table, asn_level) {
            (Some(path), Some(_)) => {
                Some(Arc::new(AsnTable::load(path).map_err(|e| {
                    ConfigError::invalid("networks.asn_table", e.to_string())
                })?))
            }
            _ => None,
        };
        Ok(NetworkSettings {
            ipv4_prefix,
            ipv6_prefix,
            prefix,
            asn: asn_level.filter(|_| asn_table.is_some() || asn_url.is_some()),
            asn_table_path: raw.asn_table,
            asn_url,
            asn_table,
            lockout,
        })
    }

    /// The budget of `level`, if it is on: the anonymous callers' share.
    pub fn budget(&self, level: NetLevel) -> Option<NetBudget> {
        match level {
            NetLevel::Prefix => self.prefix,
            NetLevel::Asn => self.asn,
        }
    }

    /// The share of `level` that callers of `tier` count against together, if the level is on:
    /// its budget scaled by the rung's own budget over the anonymous one, window by window
    /// (the anonymous share is the budget itself). Read from `tiers` at each decision, so it
    /// follows the ladder in force.
    pub fn share(&self, level: NetLevel, tier: Tier, tiers: &TierTable) -> Option<NetBudget> {
        let b = self.budget(level)?;
        if tier == Tier::Anon {
            return Some(b);
        }
        let (rung, anon): (&TierLimits, &TierLimits) = (tiers.get(tier), &tiers.anon);
        Some(NetBudget {
            burst: scale(b.burst, rung.burst, anon.burst, MAX_BURST),
            hourly: scale(b.hourly, rung.hourly, anon.hourly, u32::MAX),
        })
    }
}

/// `v × num / den`, rounded down, within 1 and `max`.
fn scale(v: NonZeroU32, num: NonZeroU32, den: NonZeroU32, max: u32) -> NonZeroU32 {
    let scaled = u64::from(v.get()) * u64::from(num.get()) / u64::from(den.get());
    let clamped = u32::try_from(scaled).unwrap_or(u32::MAX).clamp(1, max);
    NonZeroU32::new(clamped).unwrap_or(NonZeroU32::MIN)
}

fn prefix_len(
    field: &str,
    v: Option<u8>,
    default: u8,
    min: u8,
    max: u8,
) -> Result<u8, ConfigError> {
    let v = v.unwrap_or(default);
    if !(min..=max).contains(&v) {
        return Err(ConfigError::invalid(
            field,
            format!("{v} is not within {min} and {max}"),
        ));
    }
    Ok(v)
}

fn budget(
    level: NetLevel,
    raw: RawNetLevel,
    tiers: &TierTable,
) -> Result<Option<NetBudget>, ConfigError> {
    if raw.enabled == Some(false) {
        return Ok(None);
    }
    let name = level.as_str();
    let burst = raw.burst.unwrap_or(
        tiers
            .anon
            .burst
            .get()
            .saturating_mul(DEFAULT_FACTOR)
            .min(MAX_BURST),
    );
    let field = format!("networks.{name}.burst");
    let burst = NonZeroU32::new(burst).ok_or_else(|| {
        ConfigError::invalid(
            &field,
            "must be at least 1 (set `enabled = false` to turn the level off)",
        )
    })?;
    if burst.get() > MAX_BURST {
        return Err(ConfigError::invalid(
            field,
            format!("{burst} is over {MAX_BURST}, the most a burst window counts"),
        ));
    }
    let hourly = raw
        .hourly
        .unwrap_or(tiers.anon.hourly.get().saturating_mul(DEFAULT_FACTOR));
    let hourly = NonZeroU32::new(hourly).ok_or_else(|| {
        ConfigError::invalid(
            format!("networks.{name}.hourly"),
            "must be at least 1 (set `enabled = false` to turn the level off)",
        )
    })?;
    Ok(Some(NetBudget { burst, hourly }))
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::path::Path;

    use super::*;
    use crate::config::{Config, EnvMap};

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml_str(text, Path::new("test.toml"), &EnvMap::new())
    }

    #[test]
    fn on_by_default_at_ten_anonymous_callers() {
        let c = parse("[tiers.anon]\nburst = 50\nhourly = 70\n").unwrap();
        let n = &c.networks;
        assert_eq!((n.ipv4_prefix, n.ipv6_prefix), (24, 48));
        let p = n.prefix.unwrap();
        assert_eq!((p.burst.get(), p.hourly.get()), (500, 700));
        assert_eq!(n.asn, None, "no table, no ASN level");
    }

    #[test]
    fn each_rung_shares_the_network_in_proportion_to_its_own_budget() {
        let c = parse("[tiers.anon]\nburst = 50\nhourly = 70\n").unwrap();
        let n = &c.networks;
        let share = |tier| n.share(NetLevel::Prefix, tier, &c.tiers).unwrap();
        assert_eq!(
            share(Tier::Anon),
            n.prefix.unwrap(),
            "the budget is the anonymous share"
        );
        let s = share(Tier::Session);
        let own = c.tiers.session;
        // Ten session callers' worth, as the budget is ten anonymous callers' worth.
        assert_eq!(
            (s.burst.get(), s.hourly.get()),
            (own.burst.get() * 10, own.hourly.get() * 10)
        );
        // Set by hand, the budget still scales.
        let c =
            parse("[tiers.anon]\nhourly = 100\n[networks.prefix]\nhourly = 30\nburst = 65535\n")
                .unwrap();
        let s = c
            .networks
            .share(NetLevel::Prefix, Tier::Session, &c.tiers)
            .unwrap();
        assert_eq!(s.hourly.get(), 30 * c.tiers.session.hourly.get() / 100);
        assert_eq!(
            s.burst.get(),
            MAX_BURST,
            "a burst share never exceeds what a window counts"
        );
        let off = parse("[networks.prefix]\nenabled = false\n").unwrap();
        assert_eq!(
            off.networks
                .share(NetLevel::Prefix, Tier::Session, &off.tiers),
            None
        );
    }

    #[test]
    fn levels_are_configurable_or_off() {
        let c = parse("[networks.prefix]\nenabled = false\n").unwrap();
        assert_eq!(c.networks.prefix, None);
        let c = parse("[networks]\nipv4_prefix = 16\n[networks.prefix]\nhourly = 9\n").unwrap();
        assert_eq!(c.networks.ipv4_prefix, 16);
        assert_eq!(c.networks.prefix.unwrap().hourly.get(), 9);
    }

    #[test]
    fn a_network_strike_locks_addresses_by_default_and_the_prefix_on_request() {
        assert_eq!(parse("").unwrap().networks.lockout, NetLockout::Addresses);
        let c = parse("[networks]\nlockout = \"prefix\"\n").unwrap();
        assert_eq!(c.networks.lockout, NetLockout::Prefix);
        let c = parse("[networks]\nlockout = \"addresses\"\n").unwrap();
        assert_eq!(c.networks.lockout, NetLockout::Addresses);
        let err = parse("[networks]\nipv4_prefix = 24\nlockout = \"subnet\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("networks.lockout") && err.contains("line 3") && err.contains("prefix"),
            "{err}"
        );
    }

    #[test]
    fn errors_name_the_field_and_line() {
        let err = parse("[networks]\nipv4_prefix = 4\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("networks.ipv4_prefix") && err.contains("line 2"),
            "{err}"
        );
        let err = parse("[networks.asn]\nburst = 0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("networks.asn.burst"), "{err}");
    }

    #[test]
    fn asn_url_is_https_turns_the_level_on_and_excludes_asn_table() {
        let c =
            parse("[networks]\nasn_url = \"https://iptoasn.com/data/ip2asn-combined.tsv.gz\"\n")
                .unwrap();
        assert!(
            c.networks.asn.is_some(),
            "on, though nothing is fetched yet"
        );
        assert_eq!(c.networks.asn_table, None);
        for text in [
            "[networks]\nasn_url = \"http://iptoasn.com/x.tsv.gz\"\n",
            "[networks]\nasn_url = \"https://iptoasn.com/x.tsv.gz\"\nasn_table = \"/x.tsv\"\n",
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains("networks.asn_url"), "{err}");
        }
    }

    #[test]
    fn the_asn_table_loads_with_the_config_and_a_bad_one_names_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("asn.tsv");
        let mut f = std::fs::File::create(&path).unwrap();
        writeln!(f, "203.0.113.0\t203.0.113.255\t64500\tZZ\tEXAMPLE").unwrap();
        let text = format!("[networks]\nasn_table = {:?}\n", path.display().to_string());
        let c = parse(&text).unwrap();
        assert_eq!(c.networks.asn_table.as_ref().unwrap().len(), 1);
        assert!(c.networks.asn.is_some());
        writeln!(f, "203.0.114.0\tbroken\t1\tZZ\tX").unwrap();
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.contains("networks.asn_table") && err.contains("asn.tsv:2"),
            "{err}"
        );
    }
}
