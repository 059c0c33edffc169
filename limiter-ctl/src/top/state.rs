//! What `limiterctl top` shows, as plain data: one poll of the admin API (stats, history,
//! lockouts) parsed into rows (callers, networks, crawlers and agents, lockouts), the decision
//! rates derived from two polls, the selected caller, a pending confirmation and the last
//! message. Keys change this state and may ask for an
//! [`Action`]; nothing here does I/O, so the view and the keys are tested without a daemon.

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::Value;

/// The tiers and actions in the order the view lists them.
pub const TIERS: [&str; 5] = ["anon", "session", "crawler", "agent", "sponsor"];
pub const ACTIONS: [&str; 3] = ["allow", "delay", "reject"];

fn text(v: &Value, k: &str) -> String {
    match v.get(k) {
        None | Some(Value::Null) => "-".to_string(),
        Some(Value::String(x)) => x.clone(),
        Some(other) => other.to_string(),
    }
}

fn num(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

#[derive(Clone, Debug, PartialEq)]
pub struct Caller {
    /// The address when the daemon shows it (anonymous callers), else `None`.
    pub address: Option<String>,
    pub identity: String,
    pub tier: String,
    pub requests: u64,
    pub refused: u64,
    /// Why its latest refusal was made (`burst`, `hourly`, …; `None`: not refused).
    pub refused_for: Option<String>,
    /// Strikes held against the address (`None`: no address, nothing struck by it).
    pub strikes: Option<u64>,
    /// The lockout in force on the address (its own or a range holding it), as the stats say.
    pub lockout: Option<Lockout>,
}

impl Caller {
    /// What the row names: the address, else the hashed identity (key, token, session).
    pub fn name(&self) -> &str {
        self.address.as_deref().unwrap_or(&self.identity)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    pub network: String,
    pub callers: u64,
    pub requests: u64,
    pub refused: u64,
    /// The network's own range lockout (for an AS, the first range its lock made).
    pub lockout: Option<Lockout>,
}

/// A crawler or signed agent by the name it gives and its proof (`fake`: the name is claimed
/// from an address no proof vouches for).
#[derive(Clone, Debug, PartialEq)]
pub struct Crawler {
    pub name: String,
    pub proof: String,
    pub requests: u64,
    pub refused: u64,
    pub per_second: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Lockout {
    pub ip: String,
    pub remaining_secs: u64,
    pub level: String,
    pub cause: String,
    pub reason: String,
}

impl Lockout {
    /// One item of `/admin/v1/lockouts`, or a row's `lockout` in `/admin/v1/stats`.
    fn parse(l: &Value) -> Lockout {
        Lockout {
            ip: text(l, "ip"),
            remaining_secs: num(l, "remainingSecs"),
            level: text(l, "level"),
            cause: text(l, "cause"),
            reason: text(l, "reason"),
        }
    }

    /// Whether this lockout (an address or a CIDR) covers `addr`.
    pub fn covers(&self, addr: &str) -> bool {
        let Ok(a) = addr.parse::<IpAddr>() else {
            return false;
        };
        match self.ip.parse::<IpNet>() {
            Ok(net) => net.contains(&a),
            Err(_) => self.ip.parse::<IpAddr>() == Ok(a),
        }
    }
}

/// One poll of the admin API.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub at_ms: u64,
    /// Decisions since start by (tier, action).
    pub decisions: HashMap<(String, String), u64>,
    pub callers: Vec<Caller>,
    pub networks: Vec<Network>,
    pub crawlers: Vec<Crawler>,
    pub lockouts: Vec<Lockout>,
    /// Decisions per second admitted (allow + delay) and refused, oldest first (15 min at 5 s).
    pub admitted_history: Vec<f64>,
    pub refused_history: Vec<f64>,
    pub show_addresses: bool,
}

impl Snapshot {
    /// Parses the answers of `GET /admin/v1/stats`, `/history` and `/lockouts`.
    pub fn parse(stats: &Value, history: &Value, lockouts: &Value) -> Snapshot {
        let arr = |v: &Value, k: &str| v.get(k).and_then(Value::as_array).cloned();
        let decisions = arr(stats, "decisions")
            .unwrap_or_default()
            .iter()
            .map(|d| ((text(d, "tier"), text(d, "action")), num(d, "count")))
            .collect();
        let callers = arr(stats, "topByVolume")
            .unwrap_or_default()
            .iter()
            .map(|t| Caller {
                address: t.get("address").and_then(Value::as_str).map(str::to_string),
                identity: text(t, "identity"),
                tier: text(t, "tier"),
                requests: num(t, "requests"),
                refused: num(t, "refused"),
                refused_for: t
                    .get("refusedFor")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                strikes: t.get("strikes").and_then(Value::as_u64),
                lockout: t
                    .get("lockout")
                    .filter(|l| l.is_object())
                    .map(Lockout::parse),
            })
            .collect();
        let networks = arr(stats, "topNetworks")
            .unwrap_or_default()
            .iter()
            .map(|n| Network {
                network: text(n, "network"),
                callers: num(n, "callers"),
                requests: num(n, "requests"),
                refused: num(n, "refused"),
                lockout: n
                    .get("lockout")
                    .filter(|l| l.is_object())
                    .map(Lockout::parse),
            })
            .collect();
        let crawlers = arr(stats, "crawlers")
            .unwrap_or_default()
            .iter()
            .map(|c| Crawler {
                name: text(c, "name"),
                proof: text(c, "proof"),
                requests: num(c, "requests"),
                refused: num(c, "refused"),
                per_second: c.get("perSecond").and_then(Value::as_f64).unwrap_or(0.0),
            })
            .collect();
        let lockouts = arr(lockouts, "items")
            .unwrap_or_default()
            .iter()
            .map(Lockout::parse)
            .collect();
        let points = arr(history, "points").unwrap_or_default();
        let f = |p: &Value, k: &str| p.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        Snapshot {
            at_ms: num(stats, "atMs"),
            decisions,
            callers,
            networks,
            crawlers,
            lockouts,
            admitted_history: points
                .iter()
                .map(|p| f(p, "allow") + f(p, "delay"))
                .collect(),
            refused_history: points.iter().map(|p| f(p, "reject")).collect(),
            show_addresses: stats
                .get("showAddresses")
                .and_then(Value::as_bool)
                .unwrap_or(true),
        }
    }

    /// The lockout covering `c`, if any: the one its row names, else one of the listed
    /// lockouts (a daemon older than the row's `lockout` field).
    pub fn lockout_of<'a>(&'a self, c: &'a Caller) -> Option<&'a Lockout> {
        let a = c.address.as_deref()?;
        c.lockout
            .as_ref()
            .or_else(|| self.lockouts.iter().find(|l| l.covers(a)))
    }
}

/// A key, as the view understands it (the event loop maps the terminal's keys to these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Up,
    Down,
    Char(char),
    Esc,
}

/// What a key asks the event loop to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Quit,
    Lock(String),
    Unlock(String),
}

/// Everything a frame is drawn from.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// The admin API's base URL, shown in the title.
    pub url: String,
    /// The lockout `l` makes, as the API takes it (`10m`).
    pub lock_for: String,
    pub snap: Snapshot,
    /// Decisions per second by (tier, action), once two polls were made.
    pub rates: Option<HashMap<(String, String), f64>>,
    pub selected: usize,
    /// An address waiting for `y` before it is locked.
    pub confirm: Option<String>,
    /// The last outcome or error, shown on the bottom line.
    pub message: String,
}

impl View {
    pub fn new(url: &str, lock_for: &str) -> View {
        View {
            url: url.to_string(),
            lock_for: lock_for.to_string(),
            ..View::default()
        }
    }

    /// A new poll: rates are the difference with the previous one over the time between.
    pub fn update(&mut self, snap: Snapshot) {
        let dt = snap.at_ms.saturating_sub(self.snap.at_ms) as f64 / 1000.0;
        self.rates = (self.snap.at_ms > 0 && dt > 0.0).then(|| {
            snap.decisions
                .iter()
                .map(|(k, n)| {
                    let before = self.snap.decisions.get(k).copied().unwrap_or(0);
                    (k.clone(), n.saturating_sub(before) as f64 / dt)
                })
                .collect()
        });
        self.snap = snap;
        self.selected = self.selected.min(self.snap.callers.len().saturating_sub(1));
    }

    pub fn selected_caller(&self) -> Option<&Caller> {
        self.snap.callers.get(self.selected)
    }

    /// Applies a key; returns what the event loop must do.
    pub fn key(&mut self, k: Key) -> Option<Action> {
        if let Some(addr) = self.confirm.take() {
            if k == Key::Char('y') {
                return Some(Action::Lock(addr));
            }
            self.message = format!("not locked: {addr}");
            return None;
        }
        match k {
            Key::Char('q') | Key::Esc => return Some(Action::Quit),
            Key::Up | Key::Char('k') => self.selected = self.selected.saturating_sub(1),
            Key::Down | Key::Char('j') if self.selected + 1 < self.snap.callers.len() => {
                self.selected += 1
            }
            Key::Char('l') => match self.selected_caller().map(|c| c.address.clone()) {
                Some(Some(a)) => {
                    self.message = format!("lock {a} for {}? y to confirm", self.lock_for);
                    self.confirm = Some(a);
                }
                Some(None) => {
                    self.message = "this caller has no address to lock (a key, token or \
                                    session: revoke it instead)"
                        .into()
                }
                None => self.message = "no caller selected".into(),
            },
            Key::Char('u') => {
                let Some(c) = self.selected_caller() else {
                    self.message = "no caller selected".into();
                    return None;
                };
                match self.snap.lockout_of(c) {
                    Some(l) => return Some(Action::Unlock(l.ip.clone())),
                    None => self.message = format!("{} is not locked out", c.name()),
                }
            }
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn snap() -> Snapshot {
        Snapshot::parse(
            &json!({"atMs": 1000, "decisions": [{"tier": "anon", "action": "allow", "count": 10}],
                    "topByVolume": [
                        {"identity": "ip:aa", "address": "127.0.0.7", "tier": "anon", "requests": 40, "refused": 0},
                        {"identity": "key:bb", "address": null, "tier": "sponsor", "requests": 9, "refused": 0}],
                    "topNetworks": [{"network": "127.0.0.0/24", "callers": 3, "requests": 55, "refused": 0}]}),
            &json!({"points": [{"allow": 1.0, "delay": 0.5, "reject": 2.0}]}),
            &json!({"items": [{"ip": "10.0.0.0/8", "remainingSecs": 60}]}),
        )
    }

    #[test]
    fn l_then_y_locks_the_selected_address_and_anything_else_cancels() {
        let mut v = View::new("http://x", "10m");
        v.update(snap());
        assert_eq!(v.key(Key::Char('l')), None);
        assert_eq!(v.confirm.as_deref(), Some("127.0.0.7"));
        assert_eq!(
            v.key(Key::Char('y')),
            Some(Action::Lock("127.0.0.7".into()))
        );
        v.key(Key::Char('l'));
        assert_eq!(v.key(Key::Char('n')), None);
        assert!(v.message.starts_with("not locked"), "{}", v.message);
        // The key caller has no address: nothing to lock.
        v.key(Key::Down);
        assert_eq!(v.key(Key::Char('l')), None);
        assert!(v.confirm.is_none());
        v.key(Key::Down);
        assert_eq!(v.selected, 1, "the selection stays on the last row");
        assert_eq!(v.key(Key::Char('q')), Some(Action::Quit));
    }

    #[test]
    fn u_unlocks_the_lockout_covering_the_caller_and_rates_come_from_two_polls() {
        let mut v = View::new("http://x", "10m");
        v.update(snap());
        assert!(v.rates.is_none(), "one poll gives no rate");
        assert_eq!(v.key(Key::Char('u')), None, "not locked");
        let mut s = snap();
        s.at_ms = 3000;
        s.decisions.insert(("anon".into(), "allow".into()), 30);
        s.lockouts[0].ip = "127.0.0.0/24".into();
        v.update(s);
        assert_eq!(
            v.rates.as_ref().unwrap()[&("anon".into(), "allow".into())],
            10.0
        );
        assert_eq!(
            v.key(Key::Char('u')),
            Some(Action::Unlock("127.0.0.0/24".into()))
        );
        assert_eq!(v.snap.admitted_history, vec![1.5]);
    }

    #[test]
    fn rows_strikes_lockouts_and_crawlers_come_from_the_stats() {
        let s = Snapshot::parse(
            &json!({"topByVolume": [
                {"identity": "ip:aa", "address": "127.0.0.7", "tier": "anon", "requests": 40, "refused": 9,
                 "strikes": 2, "lockout": {"ip": "127.0.0.7", "remainingSecs": 30, "level": 2, "cause": "burst", "reason": "burst"}},
                {"identity": "key:bb", "address": null, "tier": "sponsor", "requests": 9, "refused": 0,
                 "strikes": null, "lockout": null}],
                "topNetworks": [
                    {"network": "AS64496", "callers": 2, "requests": 9, "refused": 1,
                     "lockout": {"ip": "AS64496", "remainingSecs": 90, "level": 1, "cause": "manual", "reason": "AS64496: x"}},
                    {"network": "127.0.0.0/24", "callers": 1, "requests": 3, "refused": 0, "lockout": null}],
                "crawlers": [{"name": "Googlebot", "proof": "fake", "requests": 3, "refused": 1, "perSecond": 0.01}]}),
            &json!({"points": []}),
            &json!({"items": []}),
        );
        let (a, k) = (&s.callers[0], &s.callers[1]);
        assert_eq!(a.strikes, Some(2));
        assert_eq!(k.strikes, None);
        // The row's lockout counts even when the listed lockouts do not hold it.
        let l = s.lockout_of(a).unwrap();
        assert_eq!(
            (l.ip.as_str(), l.level.as_str(), l.remaining_secs),
            ("127.0.0.7", "2", 30)
        );
        assert!(s.lockout_of(k).is_none());
        let nets: Vec<(&str, Option<u64>)> = s
            .networks
            .iter()
            .map(|n| {
                (
                    n.network.as_str(),
                    n.lockout.as_ref().map(|l| l.remaining_secs),
                )
            })
            .collect();
        assert_eq!(nets, [("AS64496", Some(90)), ("127.0.0.0/24", None)]);
        assert_eq!(
            s.crawlers,
            [Crawler {
                name: "Googlebot".into(),
                proof: "fake".into(),
                requests: 3,
                refused: 1,
                per_second: 0.01
            }]
        );
    }

    /// The operator page and `limiterctl top` lock for the same default (the page once locked
    /// for an hour in one click, top for ten minutes after a `y`).
    #[test]
    fn the_page_and_top_lock_for_the_same_default() {
        use clap::Parser as _;
        let page = include_str!("../../../limiter-daemon/src/admin/page.html");
        let select = page
            .split_once("<select id=\"lock-for\">")
            .and_then(|(_, rest)| rest.split_once("</select>"))
            .map(|(inner, _)| inner)
            .expect("the page's lock-for select");
        let chosen: Vec<&str> = select
            .split("<option ")
            .filter(|o| o.contains(" selected"))
            .filter_map(|o| o.split('"').nth(1))
            .collect();
        let cli = crate::args::Ctl::try_parse_from(["limiterctl", "top"]).unwrap();
        let crate::args::Command::Top(top) = cli.command else {
            panic!("top parsed as another command")
        };
        assert_eq!(chosen, [top.lock_for.as_str()]);
        assert!(
            page.contains("CONFIRM_MS"),
            "the page asks for a second click before it locks, as top asks y"
        );
    }
}
