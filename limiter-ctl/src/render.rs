//! limiterctl's output: `--json` prints the daemon's JSON as it came; otherwise a table or a
//! short sentence per verb. A refusal goes to stderr with the problem's detail and field.

use std::io::Write as _;

use serde_json::Value;

use super::args::{Command, KeysCmd, ListCmd, LockoutsCmd};
use super::client::Answer;

fn s(v: &Value, k: &str) -> String {
    match v.get(k) {
        None | Some(Value::Null) => "-".to_string(),
        Some(Value::String(x)) => x.clone(),
        Some(other) => other.to_string(),
    }
}

/// Columns padded to the widest cell.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = line(headers.iter().map(|h| h.to_string()).collect());
    for r in rows {
        out.push('\n');
        out.push_str(&line(r.clone()));
    }
    out
}

fn rows(v: &Value, cols: &[&str]) -> Vec<Vec<String>> {
    v.get("items")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|i| cols.iter().map(|c| s(i, c)).collect())
                .collect()
        })
        .unwrap_or_default()
}

fn pairs(v: &Value, keys: &[&str]) -> String {
    keys.iter()
        .map(|k| format!("{k}: {}", s(v, k)))
        .collect::<Vec<_>>()
        .join("\n")
}

fn print(text: &str) {
    // A closed pipe (`| head`) is not an error worth a message.
    drop(writeln!(std::io::stdout().lock(), "{text}"));
}

fn human(cmd: &Command, v: &Value) -> String {
    match cmd {
        Command::Clients { .. } => {
            let head = pairs(
                v,
                &[
                    "ip",
                    "group",
                    "tier",
                    "strikes",
                    "allowListed",
                    "denyListed",
                ],
            );
            let lock = v.get("lockout").filter(|l| !l.is_null()).map_or(
                "lockout: none".to_string(),
                |l| {
                    format!(
                        "lockout: until {} ({}s left, level {})",
                        s(l, "until"),
                        s(l, "remainingSecs"),
                        s(l, "level")
                    )
                },
            );
            let w = rows(
                &serde_json::json!({ "items": v.get("windows").cloned().unwrap_or_default() }),
                &["window", "used", "limit", "remaining", "resetSecs"],
            );
            format!(
                "{head}\n{lock}\nkernel: {}\n\n{}",
                v.get("kernel").map_or("-".into(), Value::to_string),
                table(&["WINDOW", "USED", "LIMIT", "REMAINING", "RESET(s)"], &w)
            )
        }
        Command::Lockouts {
            cmd: LockoutsCmd::List,
        } => table(
            &[
                "IP", "UNTIL", "LEFT(s)", "LEVEL", "CAUSE", "REASON", "SOURCE",
            ],
            &rows(
                v,
                &[
                    "ip",
                    "until",
                    "remainingSecs",
                    "level",
                    "cause",
                    "reason",
                    "source",
                ],
            ),
        ),
        Command::Lockouts {
            cmd: LockoutsCmd::Add { .. },
        } => {
            // An AS's answer lists the ranges it locked.
            let ranges = v
                .get("cidrs")
                .and_then(Value::as_array)
                .map_or(String::new(), |c| {
                    let c: Vec<&str> = c.iter().filter_map(Value::as_str).collect();
                    let noun = if c.len() == 1 { "range" } else { "ranges" };
                    format!(" ({} {noun}: {})", c.len(), c.join(" "))
                });
            format!(
                "locked {}{ranges} until {} ({}s)",
                s(v, "ip"),
                s(v, "until"),
                s(v, "remainingSecs")
            )
        }
        Command::Lockouts {
            cmd: LockoutsCmd::Remove { .. },
        } => match (v.get("ranges"), v.get("strikesForgotten")) {
            (Some(n), _) if n == 1 => format!("lifted {} (1 range)", s(v, "ip")),
            (Some(n), _) => format!("lifted {} ({n} ranges)", s(v, "ip")),
            (None, Some(n)) => {
                let lifted = if v["lifted"] == true {
                    "lifted"
                } else {
                    "not locked out"
                };
                let noun = if n == 1 { "strike" } else { "strikes" };
                format!("{lifted} {}; {n} {noun} forgotten", s(v, "ip"))
            }
            (None, None) => format!("lifted {}", s(v, "ip")),
        },
        Command::Allow { cmd } | Command::Deny { cmd } => match cmd {
            ListCmd::List => table(
                &["CIDR", "UNTIL", "REASON"],
                &rows(v, &["cidr", "until", "reason"]),
            ),
            ListCmd::Add { .. } => format!("added {} (until {})", s(v, "cidr"), s(v, "until")),
            ListCmd::Remove { .. } => format!("removed {}", s(v, "cidr")),
        },
        Command::Keys { cmd } => match cmd {
            KeysCmd::Issue { .. } => format!(
                "{}\n\nkey: {}\n(shown this once: the daemon keeps only its hash)",
                pairs(v, &["id", "tier", "hourlyLimit", "owner", "note"]),
                s(v, "key")
            ),
            KeysCmd::List => table(
                &[
                    "ID", "TIER", "HOURLY", "CREATED", "REVOKED", "OWNER", "NOTE",
                ],
                &rows(
                    v,
                    &[
                        "id",
                        "tier",
                        "hourlyLimit",
                        "createdAt",
                        "revokedAt",
                        "owner",
                        "note",
                    ],
                ),
            ),
            KeysCmd::Show { .. } => pairs(
                v,
                &[
                    "id",
                    "tier",
                    "hourlyLimit",
                    "owner",
                    "note",
                    "createdAt",
                    "revoked",
                    "revokedAt",
                ],
            ),
            KeysCmd::Revoke { .. } => format!("revoked {}", s(v, "id")),
        },
        Command::Kernel => {
            let counters = v
                .get("counters")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, n)| vec![k.clone(), n.to_string()])
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            format!(
                "{}\n\n{}",
                pairs(v, &["attached", "configuredMode", "mode"]),
                table(&["VERDICT", "PACKETS"], &counters)
            )
        }
        Command::Crawlers => crawlers(v),
        Command::Explain { .. } => {
            let w = rows(
                &serde_json::json!({ "items": v.get("windows").cloned().unwrap_or_default() }),
                &["window", "limit", "remaining", "resetSecs"],
            );
            format!(
                "{}\n\n{}",
                pairs(
                    v,
                    &[
                        "action",
                        "tier",
                        "reason",
                        "decidedBy",
                        "delayMs",
                        "retryAfter",
                        "keyStatus"
                    ]
                ),
                table(&["WINDOW", "LIMIT", "REMAINING", "RESET(s)"], &w)
            )
        }
        Command::Config => serde_json::to_string_pretty(v).unwrap_or_default(),
        Command::Reload => {
            let changes = v
                .get("changes")
                .and_then(Value::as_array)
                .map(|c| {
                    c.iter()
                        .map(|x| format!("  {}", x.as_str().unwrap_or("")))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            format!(
                "applied ({} changes)\n{}",
                changes.len(),
                changes.join("\n")
            )
            .trim_end()
            .to_string()
        }
        // `top` draws its own frames (ctl::top::view) and never comes here.
        Command::Top(_) => v.to_string(),
        // Answered without the daemon (ctl::main_with); never sent.
        Command::Completions { .. } | Command::ManPages { .. } => v.to_string(),
    }
}

/// `limiterctl crawlers`: one row per fetched source, then each source's last error.
fn crawlers(v: &Value) -> String {
    let sources = v
        .get("sources")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let head = format!("range prefixes in force: {}", s(v, "rangePrefixes"));
    if sources.is_empty() {
        return format!(
            "{head}\nno fetched sources ([crawlers] range_urls and [networks] asn_url are unset)"
        );
    }
    let rows: Vec<Vec<String>> = sources
        .iter()
        .map(|src| {
            let proves = match src.get("crawler").and_then(Value::as_str) {
                Some(c) => c.to_string(),
                None => s(src, "kind"),
            };
            let mut entries = s(src, "entries");
            if src.get("fromDisk").and_then(Value::as_bool) == Some(true) {
                entries.push_str(" (disk)");
            }
            vec![
                s(src, "url"),
                proves,
                entries,
                s(src, "lastFetchAt"),
                s(src, "lastOutcome"),
                s(src, "errors"),
            ]
        })
        .collect();
    let mut out = format!(
        "{head}\n\n{}",
        table(
            &[
                "SOURCE",
                "PROVES",
                "ENTRIES",
                "LAST FETCH",
                "OUTCOME",
                "ERRORS"
            ],
            &rows
        )
    );
    for src in &sources {
        if let Some(e) = src.get("lastError").and_then(Value::as_str) {
            out.push_str(&format!("\n{}: {e}", s(src, "url")));
        }
    }
    out
}

pub fn success(cmd: &Command, v: &Value, json: bool) {
    if json {
        print(&v.to_string());
    } else {
        print(&human(cmd, v));
    }
}

pub fn refusal(a: &Answer, json: bool) {
    if json {
        print(&a.body.to_string());
    }
    let field = a.body.get("field").and_then(Value::as_str);
    eprintln!(
        "limiterctl: refused ({}): {}{}",
        a.status.as_u16(),
        s(&a.body, "detail"),
        field.map(|f| format!(" [field: {f}]")).unwrap_or_default()
    );
}
