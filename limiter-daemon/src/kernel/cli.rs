//! `limiter-daemon kernel …` and `detach`: operator commands that work on the pinned maps
//! directly, so an operator can act while the daemon is stopped.
//!
//! `lock` and `unlock` first look for a running daemon (the config's `[admin] listen`): when one
//! answers they go through its admin API, so the store and the kernel agree; with the daemon
//! down they write the pins, and `unlock` also lifts the store's lockout when the config's store
//! can be opened (else the next start would push it back).
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
use limiter_common::args::{parse_cidr, parse_duration, parse_ip};

/// `kernel` subcommands.
#[derive(Debug, Args)]
pub struct KernelArgs {
    /// bpffs directory holding the limiter's pinned maps and links.
    #[arg(long, global = true, default_value = DEFAULT_PIN_PATH)]
    pub pin_path: PathBuf,
    /// The daemon's config: where its admin API and store are (for `lock` and `unlock`).
    #[arg(long, global = true, default_value = "/etc/limiter/limiter.toml")]
    pub config: PathBuf,
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

/// `detach` arguments: the pins' directory, given or read from the config's `[kernel]
/// pin_path`.
#[derive(Debug, Args)]
pub struct DetachArgs {
    /// bpffs directory holding the limiter's pinned maps and links (default: the config's
    /// `[kernel] pin_path`).
    #[arg(long, conflicts_with = "config")]
    pub pin_path: Option<PathBuf>,
    /// The daemon's config, read for `[kernel] pin_path` [default: /etc/limiter/limiter.toml,
    /// when it exists; else /sys/fs/bpf/limiter].
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// The default config `detach` reads when given neither `--pin-path` nor `--config`.
const DEFAULT_CONFIG: &str = "/etc/limiter/limiter.toml";

impl DetachArgs {
    /// `--pin-path`; else `--config`'s `[kernel] pin_path` (a config that does not load is an
    /// error naming it); else the default config's, when it exists and loads; else the default.
    pub fn pin_path(&self) -> anyhow::Result<PathBuf> {
        if let Some(p) = &self.pin_path {
            return Ok(p.clone());
        }
        let env = crate::config::env_from_process();
        if let Some(config) = &self.config {
            let cfg = crate::config::Config::load(config, &env).with_context(|| {
                format!(
                    "reading [kernel] pin_path from {} (or give --pin-path)",
                    config.display()
                )
            })?;
            return Ok(cfg.kernel.pin_path);
        }
        let default = Path::new(DEFAULT_CONFIG);
        if !default.exists() {
            return Ok(PathBuf::from(DEFAULT_PIN_PATH));
        }
        match crate::config::Config::load(default, &env) {
            Ok(cfg) => Ok(cfg.kernel.pin_path),
            Err(e) => {
                eprintln!(
                    "note: config {DEFAULT_CONFIG} not usable ({e}); detaching {DEFAULT_PIN_PATH}"
                );
                Ok(PathBuf::from(DEFAULT_PIN_PATH))
            }
        }
    }
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

fn load_config(path: &Path) -> Option<crate::config::Config> {
    match crate::config::Config::load(path, &crate::config::env_from_process()) {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!(
                "note: config {} not usable ({e}); working on the pins only",
                path.display()
            );
            None
        }
    }
}

/// `Ok(true)` when a running daemon's admin API took the request.
fn via_admin(
    cfg: Option<&crate::config::Config>,
    method: http::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> anyhow::Result<Option<http::StatusCode>> {
    let Some(target) = cfg.and_then(super::admin_call::AdminTarget::from_config) else {
        return Ok(None);
    };
    match target.call(method, path, body)? {
        None => Ok(None),
        Some((status, _)) if status.is_success() || status == http::StatusCode::NOT_FOUND => {
            Ok(Some(status))
        }
        Some((status, v)) => anyhow::bail!(
            "the running daemon's admin API at {} refused: {status} {}",
            target.addr,
            v.get("detail")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
        ),
    }
}

/// Lifts the store's lockout of `ip` (daemon down), so the next start does not restore it.
fn lift_in_store(cfg: Option<&crate::config::Config>, ip: IpAddr) -> String {
    let Some(cfg) = cfg else {
        return "the store was not updated (no usable config)".to_string();
    };
    let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
    let group = crate::identity::client_ip::group(ip, cfg.identity.ipv6_prefix);
    match crate::fleet::open(&cfg.store, now).map(|s| s.remove_lockout(group)) {
        Ok(Ok(Some(_))) => "lifted in the store too".to_string(),
        Ok(Ok(None)) => "the store held no lockout for it".to_string(),
        Ok(Err(e)) | Err(e) => format!(
            "the store could not be updated ({}): the next start may restore it",
            super::error::chain(&e)
        ),
    }
}

/// Runs one `kernel` subcommand, printing its result on stdout.
pub fn run_kernel(args: KernelArgs) -> anyhow::Result<()> {
    match args.command {
        KernelCommand::Lock {
            ip,
            duration,
            level,
        } => {
            let cfg = load_config(&args.config);
            let body = serde_json::json!({ "ip": ip.to_string(), "for": format!("{}s", duration.as_secs().max(1)) });
            if via_admin(
                cfg.as_ref(),
                http::Method::POST,
                "/admin/v1/lockouts",
                Some(body),
            )?
            .is_some()
            {
                out!(
                    "locked {ip} for {} through the running daemon's admin API (store and kernel)",
                    humantime::format_duration(duration)
                );
                return Ok(());
            }
            if let Some(cfg) = cfg.as_ref() {
                let group = crate::identity::client_ip::group(ip, cfg.identity.ipv6_prefix);
                let net = crate::engine::exempt::group_net(cfg, group);
                if let Some(proxy) = crate::engine::exempt::trusted_proxy_in(cfg, &net) {
                    anyhow::bail!(
                        "ip: {ip} is the trusted proxy {proxy}: locking it would lock out every \
                         client behind it; lock the client's own address instead"
                    );
                }
            }
            open(&args.pin_path)?.lock(ip, duration, level)?;
            out!(
                "locked {ip} for {} (level {level}) in the pins (daemon not running)",
                humantime::format_duration(duration)
            );
            return Ok(());
        }
        KernelCommand::Unlock { ip } => {
            let cfg = load_config(&args.config);
            let path = format!("/admin/v1/lockouts/{}", ip);
            match via_admin(cfg.as_ref(), http::Method::DELETE, &path, None)? {
                Some(s) if s.is_success() => {
                    out!("unlocked {ip} through the running daemon's admin API (store and kernel)");
                    return Ok(());
                }
                Some(_) => {
                    out!("{ip} was not locked (the running daemon's admin API has no lockout for it)");
                    return Ok(());
                }
                None => {}
            }
            let kernel = open(&args.pin_path)?.unlock(ip)?;
            let store = lift_in_store(cfg.as_ref(), ip);
            if kernel {
                out!("unlocked {ip} in the pins (daemon not running); {store}");
            } else {
                out!("{ip} was not locked in the pins (daemon not running); {store}");
            }
            return Ok(());
        }
        _ => {}
    }
    let maps = open(&args.pin_path)?;
    match args.command {
        KernelCommand::Lock { .. } | KernelCommand::Unlock { .. } => {}
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
    let pin_path = args.pin_path()?;
    let layout = PinLayout::new(&pin_path);
    let report =
        loader::detach(&layout).with_context(|| format!("detaching {}", pin_path.display()))?;
    if report.links.is_empty() && report.maps.is_empty() {
        out!("nothing pinned under {}", pin_path.display());
    } else {
        for l in &report.links {
            out!("detached {l}");
        }
        out!("removed {} pinned maps", report.maps.len());
    }
    if !report.left_behind.is_empty() {
        eprintln!(
            "kept {} (not created by the limiter): {}",
            pin_path.display(),
            report.left_behind.join(", ")
        );
    }
    Ok(())
}
