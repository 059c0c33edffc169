//! `limiter-daemon kernel …` and `detach`: operator commands that work on the pinned maps
//! directly, so an operator can act while the daemon is stopped.
//!
//! Arguments are parsed by clap value parsers: a bad IP, CIDR or duration is a usage error with a
//! message naming the value, and the process exits with code 2 (other failures exit 1).

use std::io::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use ipnet::IpNet;

use super::loader;
use super::maps::KernelMaps;
use super::pins::PinLayout;
use super::status;
use crate::config::kernel::DEFAULT_PIN_PATH;

/// `kernel` subcommands.
#[derive(Debug, Args)]
pub struct KernelArgs {
    /// bpffs directory holding the limiter's pinned maps and links.
    #[arg(long, global = true, default_value = DEFAULT_PIN_PATH)]
    pub pin_path: PathBuf,
    #[command(subcommand)]
    pub command: KernelCommand,
}

#[derive(Debug, Subcommand)]
pub enum KernelCommand {
    /// Drop every packet from IP (to protected ports) for a while.
    Lock {
        #[arg(value_parser = parse_ip)]
        ip: IpAddr,
        /// How long, e.g. 90s, 10m, 2h.
        #[arg(long = "for", value_parser = parse_duration)]
        duration: Duration,
        /// Escalation level recorded with the lockout (1 = first).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        level: u32,
    },
    /// Lift a lockout now.
    Unlock {
        #[arg(value_parser = parse_ip)]
        ip: IpAddr,
    },
    /// Exempt a CIDR from every kernel check.
    Allow {
        #[arg(value_parser = parse_cidr)]
        cidr: IpNet,
    },
    /// Remove a CIDR from the allow-list.
    Unallow {
        #[arg(value_parser = parse_cidr)]
        cidr: IpNet,
    },
    /// Drop a CIDR's packets (to protected ports), optionally for a while.
    Deny {
        #[arg(value_parser = parse_cidr)]
        cidr: IpNet,
        /// How long, e.g. 1h; without it the entry stays until `undeny`.
        #[arg(long = "for", value_parser = parse_duration)]
        duration: Option<Duration>,
    },
    /// Remove a CIDR from the deny-list.
    Undeny {
        #[arg(value_parser = parse_cidr)]
        cidr: IpNet,
    },
    /// Lockouts, allow-list and deny-list entries held in the kernel.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Mode, interfaces, per-verdict counters and map fill.
    Status {
        #[arg(long)]
        json: bool,
    },
}

/// `detach` arguments.
#[derive(Debug, Args)]
pub struct DetachArgs {
    #[arg(long, default_value = DEFAULT_PIN_PATH)]
    pub pin_path: PathBuf,
}

/// Parses an IP address (IPv4, IPv6, or IPv4-mapped IPv6).
pub fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.trim()
        .parse::<IpAddr>()
        .map_err(|_| format!("{s:?} is not an IP address (expected e.g. 192.0.2.7 or 2001:db8::1)"))
}

/// Parses a CIDR; a bare address means a single host. Host bits set is refused, since
/// `10.0.0.1/8` is almost always a typo for something else.
pub fn parse_cidr(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    let net = if s.contains('/') {
        s.parse::<IpNet>().map_err(|_| {
            format!("{s:?} is not a CIDR (expected e.g. 198.51.100.0/24 or 2001:db8::/48)")
        })?
    } else {
        IpNet::from(parse_ip(s)?)
    };
    if net.trunc() != net {
        return Err(format!(
            "{s:?} has host bits set; did you mean {}?",
            net.trunc()
        ));
    }
    Ok(net)
}

/// Parses a positive duration such as `90s`, `10m`, `1h30m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("{s:?} is not a duration ({e}); expected e.g. 90s, 10m, 2h"))?;
    if d.is_zero() {
        return Err(format!("{s:?}: the duration must be longer than zero"));
    }
    Ok(d)
}

/// Prints a line on stdout; a closed pipe (`… | head`) ends output quietly instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                return Err(anyhow::Error::from(e).context("writing to stdout"));
            }
        }
    };
}

fn open(pin_path: &Path) -> anyhow::Result<KernelMaps> {
    Ok(KernelMaps::open(&PinLayout::new(pin_path))?)
}

/// Runs one `kernel` subcommand, printing its result on stdout.
pub fn run_kernel(args: KernelArgs) -> anyhow::Result<()> {
    let maps = open(&args.pin_path)?;
    match args.command {
        KernelCommand::Lock {
            ip,
            duration,
            level,
        } => {
            maps.lock(ip, duration, level)?;
            out!(
                "locked {ip} for {} (level {level})",
                humantime::format_duration(duration)
            );
        }
        KernelCommand::Unlock { ip } => {
            if maps.unlock(ip)? {
                out!("unlocked {ip}");
            } else {
                out!("{ip} was not locked");
            }
        }
        KernelCommand::Allow { cidr } => {
            maps.allow_add(cidr)?;
            out!("allowed {cidr}");
        }
        KernelCommand::Unallow { cidr } => {
            if maps.allow_remove(cidr)? {
                out!("removed {cidr} from the allow-list");
            } else {
                out!("{cidr} was not in the allow-list");
            }
        }
        KernelCommand::Deny { cidr, duration } => {
            maps.deny_add(cidr, duration)?;
            match duration {
                Some(d) => out!("denied {cidr} for {}", humantime::format_duration(d)),
                None => out!("denied {cidr} until `kernel undeny`"),
            }
        }
        KernelCommand::Undeny { cidr } => {
            if maps.deny_remove(cidr)? {
                out!("removed {cidr} from the deny-list");
            } else {
                out!("{cidr} was not in the deny-list");
            }
        }
        KernelCommand::List { json } => {
            let lockouts = maps.lockouts()?;
            let allow = maps.allow_list()?;
            let deny = maps.deny_list()?;
            if json {
                let v = serde_json::json!({ "lockouts": lockouts, "allow": allow, "deny": deny });
                out!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                out!("lockouts ({}):", lockouts.len());
                for l in &lockouts {
                    let left = l.remaining.map_or("expired".to_string(), |d| {
                        humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
                    });
                    out!("  {:<40} level {} {left}", l.ip, l.level);
                }
                out!("allow ({}):", allow.len());
                for a in &allow {
                    out!("  {a}");
                }
                out!("deny ({}):", deny.len());
                for d in &deny {
                    let left = match (d.remaining, d.expired) {
                        (_, true) => "expired".to_string(),
                        (Some(r), _) => {
                            humantime::format_duration(Duration::from_secs(r.as_secs())).to_string()
                        }
                        (None, _) => "no expiry".to_string(),
                    };
                    out!("  {:<40} {left}", d.cidr);
                }
            }
        }
        KernelCommand::Status { json } => {
            let st = status::gather(&PinLayout::new(&args.pin_path), &maps)?;
            if json {
                out!("{}", serde_json::to_string_pretty(&st)?);
            } else {
                out!("{}", st.render().trim_end());
            }
        }
    }
    Ok(())
}

/// `detach`: removes the links (detaching the program) and every pin.
pub fn run_detach(args: DetachArgs) -> anyhow::Result<()> {
    let layout = PinLayout::new(&args.pin_path);
    let report = loader::detach(&layout)
        .with_context(|| format!("detaching {}", args.pin_path.display()))?;
    if report.links.is_empty() && report.maps.is_empty() {
        out!("nothing pinned under {}", args.pin_path.display());
    } else {
        for l in &report.links {
            out!("detached {l}");
        }
        out!("removed {} pinned maps", report.maps.len());
    }
    if !report.left_behind.is_empty() {
        eprintln!(
            "kept {} (not created by the limiter): {}",
            args.pin_path.display(),
            report.left_behind.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_inputs_are_named() {
        assert!(parse_ip("10.0.0.300").unwrap_err().contains("10.0.0.300"));
        assert!(parse_cidr("10.0.0.0/33")
            .unwrap_err()
            .contains("not a CIDR"));
        assert!(parse_cidr("10.0.0.1/8").unwrap_err().contains("10.0.0.0/8"));
        assert!(parse_duration("soon").unwrap_err().contains("soon"));
        assert!(parse_duration("0s")
            .unwrap_err()
            .contains("longer than zero"));
    }

    #[test]
    fn good_inputs_parse() {
        assert_eq!(
            parse_ip(" ::ffff:1.2.3.4 ").unwrap().to_string(),
            "::ffff:1.2.3.4"
        );
        assert_eq!(parse_cidr("192.0.2.7").unwrap().to_string(), "192.0.2.7/32");
        assert_eq!(
            parse_cidr("2001:db8::/48").unwrap().to_string(),
            "2001:db8::/48"
        );
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
    }
}
