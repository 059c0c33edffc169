//! limiterctl's command line, and the admin request each verb makes. Every value is checked by
//! a clap value parser, so a bad one is a usage error (exit 2) naming the value.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use ipnet::IpNet;
use serde_json::{json, Value};

use limiter_common::args::{
    lockable, net_text, parse_asn, parse_cidr, parse_duration, parse_ip, parse_tier,
};
use limiter_common::tier::Tier;

#[derive(Debug, Parser)]
#[command(
    name = "limiterctl",
    version,
    about = "Operate a running limiter-daemon over its admin API"
)]
pub struct Ctl {
    /// Print the daemon's JSON instead of tables (may stand anywhere on the line).
    #[arg(long, global = true)]
    pub json: bool,
    #[command(flatten)]
    pub conn: Conn,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the daemon is and how to authenticate.
#[derive(Debug, Args)]
pub struct Conn {
    /// Admin API base URL, e.g. http://127.0.0.1:9465 (else LIMITER_ADMIN_URL, else the config).
    #[arg(long, global = true, env = "LIMITER_ADMIN_URL")]
    pub url: Option<String>,
    /// Admin token (else LIMITER_ADMIN_TOKEN, else the config's token file or <state_dir>/admin-token).
    #[arg(
        long,
        global = true,
        env = "LIMITER_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// The daemon's config, read for the address and token when they are not given.
    #[arg(long, global = true, default_value = "/etc/limiter/limiter.toml")]
    pub config: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// One client's windows, strikes, lockout and kernel entries.
    Clients {
        #[command(subcommand)]
        cmd: ClientsCmd,
    },
    /// Lockouts: list, add (an IP, a CIDR or an AS), remove.
    Lockouts {
        #[command(subcommand)]
        cmd: LockoutsCmd,
    },
    /// The allow list.
    Allow {
        #[command(subcommand)]
        cmd: ListCmd,
    },
    /// The deny list.
    Deny {
        #[command(subcommand)]
        cmd: ListCmd,
    },
    /// API keys: issue, list, show, revoke.
    Keys {
        #[command(subcommand)]
        cmd: KeysCmd,
    },
    /// The kernel dataplane: mode, interfaces, counters, map fill.
    Kernel,
    /// The fetched crawler proofs (range lists, the ASN table): each source's crawler,
    /// entries in force, last fetch and outcome, errors.
    Crawlers,
    /// What the daemon would decide for a request (counts nothing).
    Explain {
        #[arg(long, value_parser = parse_ip)]
        ip: std::net::IpAddr,
        #[arg(long, default_value = "GET", value_parser = parse_method)]
        method: String,
        #[arg(long, default_value = "/", value_parser = parse_path)]
        path: String,
        /// A request header, `Name: value` (repeatable).
        #[arg(long = "header", value_parser = parse_header)]
        headers: Vec<(String, String)>,
    },
    /// The effective config, secrets redacted.
    Config,
    /// Validate the config file and apply it.
    Reload,
    /// A live view: decisions by tier, top callers and networks, crawlers and agents, lockouts
    /// (l lock, u unlock, q quit); `--once` prints one frame.
    Top(TopArgs),
    /// Print the shell completion script for SHELL on stdout (no daemon needed), e.g.
    /// `limiterctl completions bash > /etc/bash_completion.d/limiterctl`.
    Completions {
        #[arg(value_enum)]
        shell: limiter_common::manuals::Shell,
    },
    /// Write the man pages into DIR (`cargo xtask package` ships them).
    #[command(hide = true)]
    ManPages { dir: PathBuf },
}

#[derive(Debug, Subcommand)]
pub enum ClientsCmd {
    /// One client's tier, windows, strikes, lockout and kernel entries.
    Show {
        #[arg(value_parser = parse_ip)]
        ip: std::net::IpAddr,
    },
}

#[derive(Debug, Subcommand)]
pub enum LockoutsCmd {
    /// Active lockouts: addresses and CIDRs, until when, level, reason and source.
    List,
    /// Lock an address, a CIDR or an AS out (in the store and the kernel) for a while.
    Add {
        /// An address, a CIDR (IPv4 /8–/32, IPv6 /16–/128) or an AS (`AS64496`: the ranges the
        /// daemon's IP-to-ASN table gives it).
        #[arg(value_name = "IP|CIDR|AS", value_parser = parse_lock_target)]
        ip: LockArg,
        /// How long, e.g. 90s, 10m, 2h.
        #[arg(long = "for", value_parser = parse_duration)]
        duration: Duration,
        /// Kept with the lockout and shown by `list`.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Lift a lockout (store and kernel); an AS lifts every range its lockout locked.
    Remove {
        #[arg(value_name = "IP|CIDR|AS", value_parser = parse_lock_target)]
        ip: LockArg,
        /// Also forget the address's strikes (kept after a lift, and after a lockout runs
        /// out, until they decay), so its next burst locks it at level 1 again. An address
        /// only; works whether or not it is locked out now.
        #[arg(long)]
        forget_strikes: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ListCmd {
    /// The entries, with their deadlines and reasons.
    List,
    /// Add an address or CIDR.
    Add {
        #[arg(value_parser = parse_cidr)]
        cidr: IpNet,
        /// How long the entry lasts, e.g. 10m, 2h (absent: until removed).
        #[arg(long = "for", value_parser = parse_duration)]
        duration: Option<Duration>,
        /// Kept with the entry and shown by `list`.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Remove an entry.
    Remove {
        #[arg(value_parser = parse_cidr)]
        cidr: IpNet,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCmd {
    /// Issue a key; the whole key is printed this once (the daemon keeps only its hash).
    Issue {
        /// The rung the key meters at (default sponsor).
        #[arg(long, value_parser = parse_tier)]
        tier: Option<Tier>,
        /// The key's own hourly limit, on routes with `key_limit` (default `[keys]
        /// default_hourly_limit`).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        hourly_limit: Option<u32>,
        /// Who the key is for.
        #[arg(long)]
        owner: Option<String>,
        /// Free text kept with the key.
        #[arg(long)]
        note: Option<String>,
    },
    /// Every key: id, tier, hourly limit, created, revoked, owner, note (never a secret).
    List,
    /// One key by its id.
    Show {
        #[arg(value_parser = parse_key_id)]
        id: String,
    },
    /// Revoke a key: it is metered one rung down from its next request.
    Revoke {
        #[arg(value_parser = parse_key_id)]
        id: String,
    },
}

/// `limiterctl top`'s options (the view itself is ctl::top).
#[derive(Debug, Args)]
pub struct TopArgs {
    /// Print one frame as plain text and exit (for scripts).
    #[arg(long)]
    pub once: bool,
    /// The width of the `--once` frame, in columns.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(60..=400))]
    pub width: u16,
    /// How long `l` locks the selected caller out, e.g. 10m, 2h.
    #[arg(long = "lock-for", default_value = "10m", value_parser = parse_lock_for)]
    pub lock_for: String,
}

fn parse_lock_for(s: &str) -> Result<String, String> {
    parse_duration(s).map(|_| s.to_string())
}

/// What `lockouts add|remove` names: an address or a CIDR, or an autonomous system, which the
/// daemon locks as the ranges its IP-to-ASN table gives it (the daemon's `engine::asn_lockouts`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LockArg {
    Net(IpNet),
    Asn(u32),
}

impl LockArg {
    /// As the admin API takes it in `ip`: `203.0.113.9`, `198.51.100.0/24`, `AS64496`.
    fn text(&self) -> String {
        match self {
            LockArg::Net(net) => net_text(net),
            LockArg::Asn(asn) => format!("AS{asn}"),
        }
    }

    /// As a path segment.
    fn seg(&self) -> String {
        match self {
            LockArg::Net(net) => seg(net),
            LockArg::Asn(_) => self.text(),
        }
    }
}

/// What the parser cannot check alone, checked before anything is sent: strikes are kept per
/// address, so `--forget-strikes` names one.
pub fn check(cmd: &Command) -> Result<(), String> {
    match cmd {
        Command::Lockouts {
            cmd:
                LockoutsCmd::Remove {
                    ip,
                    forget_strikes: true,
                },
        } if !matches!(ip, LockArg::Net(n) if n.prefix_len() == n.max_prefix_len()) => {
            Err(format!(
                "--forget-strikes forgets one address's strikes, and {} is not an address",
                ip.text()
            ))
        }
        _ => Ok(()),
    }
}

fn parse_lock_target(s: &str) -> Result<LockArg, String> {
    let t = s.trim();
    if t.get(..2).is_some_and(|p| p.eq_ignore_ascii_case("as")) {
        return parse_asn(t).map(LockArg::Asn).ok_or_else(|| {
            format!("{s:?} is not an AS number (AS and a number up to 4294967295, e.g. AS64496)")
        });
    }
    let net = parse_cidr(t).map_err(|e| {
        // Without a `/` the only failure is not being an address: name all three forms.
        if t.contains('/') {
            e
        } else {
            format!(
                "{s:?} is not an address, a CIDR or an AS number (expected e.g. 192.0.2.7, \
                 198.51.100.0/24 or AS64496)"
            )
        }
    })?;
    lockable(net).map_err(|e| e.to_string())?;
    Ok(LockArg::Net(net))
}

fn parse_key_id(s: &str) -> Result<String, String> {
    let ok = s.len() == 8
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a key id (8 lower-case hex digits, as `keys list` shows)"
        ))
    }
}

fn parse_method(s: &str) -> Result<String, String> {
    http::Method::from_bytes(s.as_bytes())
        .map(|m| m.as_str().to_string())
        .map_err(|_| format!("{s:?} is not an HTTP method"))
}

fn parse_path(s: &str) -> Result<String, String> {
    if s.starts_with('/') {
        Ok(s.to_string())
    } else {
        Err(format!("{s:?}: a path starts with `/`"))
    }
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: write a header as 'Name: value'"))?;
    let k = k.trim();
    http::HeaderName::from_bytes(k.as_bytes())
        .map_err(|_| format!("{k:?} is not a header name"))?;
    Ok((k.to_string(), v.trim().to_string()))
}

/// One admin request.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub method: http::Method,
    pub path: String,
    pub body: Option<Value>,
    /// Follow `nextCursor` and join the pages' `items`.
    pub paged: bool,
}

fn get(path: String) -> Request {
    Request {
        method: http::Method::GET,
        path,
        body: None,
        paged: false,
    }
}

fn post(path: String, body: Value) -> Request {
    Request {
        method: http::Method::POST,
        path,
        body: Some(body),
        paged: false,
    }
}

fn delete(path: String) -> Request {
    Request {
        method: http::Method::DELETE,
        path,
        body: None,
        paged: false,
    }
}

/// A CIDR in a path segment (`/` as `%2F`).
fn seg(net: &IpNet) -> String {
    net_text(net).replace('/', "%2F")
}

fn list_requests(kind: &str, cmd: &ListCmd) -> Request {
    match cmd {
        ListCmd::List => get(format!("/admin/v1/lists/{kind}")),
        ListCmd::Add {
            cidr,
            duration,
            reason,
        } => {
            let mut b = json!({ "cidr": cidr.to_string() });
            if let Some(d) = duration {
                b["for"] = json!(format!("{}s", d.as_secs().max(1)));
            }
            if let Some(r) = reason {
                b["reason"] = json!(r);
            }
            post(format!("/admin/v1/lists/{kind}"), b)
        }
        ListCmd::Remove { cidr } => delete(format!("/admin/v1/lists/{kind}/{}", seg(cidr))),
    }
}

/// The request a verb makes.
pub fn request(cmd: &Command) -> Request {
    match cmd {
        Command::Clients {
            cmd: ClientsCmd::Show { ip },
        } => get(format!("/admin/v1/clients/{ip}")),
        Command::Lockouts { cmd } => match cmd {
            LockoutsCmd::List => Request {
                paged: true,
                ..get("/admin/v1/lockouts".into())
            },
            LockoutsCmd::Add {
                ip,
                duration,
                reason,
            } => {
                let mut b = json!({ "ip": ip.text(),
                                    "for": format!("{}s", duration.as_secs().max(1)) });
                if let Some(r) = reason {
                    b["reason"] = json!(r);
                }
                post("/admin/v1/lockouts".into(), b)
            }
            LockoutsCmd::Remove { ip, forget_strikes } => {
                let query = if *forget_strikes {
                    "?forgetStrikes=true"
                } else {
                    ""
                };
                delete(format!("/admin/v1/lockouts/{}{query}", ip.seg()))
            }
        },
        Command::Allow { cmd } => list_requests("allow", cmd),
        Command::Deny { cmd } => list_requests("deny", cmd),
        Command::Keys { cmd } => match cmd {
            KeysCmd::Issue {
                tier,
                hourly_limit,
                owner,
                note,
            } => {
                let mut b = json!({});
                if let Some(t) = tier {
                    b["tier"] = json!(t.as_str());
                }
                if let Some(h) = hourly_limit {
                    b["hourlyLimit"] = json!(h);
                }
                if let Some(o) = owner {
                    b["owner"] = json!(o);
                }
                if let Some(n) = note {
                    b["note"] = json!(n);
                }
                post("/admin/v1/keys".into(), b)
            }
            KeysCmd::List => get("/admin/v1/keys".into()),
            KeysCmd::Show { id } => get(format!("/admin/v1/keys/{id}")),
            KeysCmd::Revoke { id } => delete(format!("/admin/v1/keys/{id}")),
        },
        Command::Kernel => get("/admin/v1/kernel".into()),
        Command::Crawlers => get("/admin/v1/crawlers".into()),
        Command::Explain {
            ip,
            method,
            path,
            headers,
        } => {
            let h: serde_json::Map<String, Value> =
                headers.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
            post(
                "/admin/v1/explain".into(),
                json!({ "ip": ip.to_string(), "method": method, "path": path, "headers": h }),
            )
        }
        Command::Config => get("/admin/v1/config".into()),
        Command::Reload => post("/admin/v1/reload".into(), json!({})),
        // `top` polls several paths (ctl::top); this is its first.
        Command::Top(_) => get("/admin/v1/stats?top=10".into()),
        // Answered without the daemon (ctl::main_with) and never sent; the stats path keeps
        // this total without a request of their own.
        Command::Completions { .. } | Command::ManPages { .. } => get("/admin/v1/stats".into()),
    }
}
