//! The effective limits as a plain-text table: what `check-config` prints after validation.

use std::fmt::Write;

use super::file::Config;
use crate::model::Tier;

/// Renders the effective limits (after environment overrides) for humans.
pub fn effective_limits(cfg: &Config) -> String {
    let mut out = String::new();
    let daily = |t: Tier| {
        cfg.tiers
            .get(t)
            .daily
            .map_or("none".to_string(), |v| v.to_string())
    };
    let _ = writeln!(
        out,
        "{:<10} {:>10} {:>12} {:>12}",
        "tier", "burst/60s", "budget/hour", "daily quota"
    );
    for t in Tier::ALL {
        let l = cfg.tiers.get(t);
        let _ = writeln!(
            out,
            "{:<10} {:>10} {:>12} {:>12}",
            t.as_str(),
            l.burst,
            l.hourly,
            daily(t)
        );
    }
    let _ = writeln!(out);
    match &cfg.jwt {
        Some(j) => {
            let _ = writeln!(
                out,
                "token holders: {:?} bearer JWT, metered as {}, daily quota {}",
                j.algorithm,
                j.token_tier.as_str(),
                cfg.quota.token
            );
        }
        None => {
            let _ = writeln!(out, "token holders: off (no [jwt] section)");
        }
    }
    let _ = writeln!(
        out,
        "API keys: {}_<8 hex>_<20+ chars>, default hourly_limit {}",
        cfg.keys.prefix, cfg.keys.default_hourly_limit
    );
    let _ = writeln!(
        out,
        "daily delay mode: soft {} ms for the first {} units over, then hard {} ms; reminder at {} remaining",
        cfg.quota.soft_delay.as_millis(),
        cfg.quota.soft_window,
        cfg.quota.hard_delay.as_millis(),
        cfg.quota.warn_threshold
    );
    let _ = writeln!(
        out,
        "lockouts: {} x 2^(strikes-1), cap {}, one strike forgiven per {} quiet, jitter {}",
        humantime::format_duration(cfg.lockout.base),
        humantime::format_duration(cfg.lockout.cap),
        humantime::format_duration(cfg.lockout.decay),
        cfg.lockout.jitter
    );
    let n = &cfg.networks;
    let level = |b: Option<super::networks::NetBudget>| {
        b.map_or("off".to_string(), |b| {
            format!("burst {}/60s, hourly {}", b.burst, b.hourly)
        })
    };
    let _ = writeln!(
        out,
        "networks: /{} (IPv4), /{} (IPv6) {}; ASN {}",
        n.ipv4_prefix,
        n.ipv6_prefix,
        level(n.prefix),
        match (&n.asn_table, &n.asn_url, n.asn) {
            (Some(t), _, Some(_)) => format!("{} ({} ranges)", level(n.asn), t.len()),
            (None, Some(url), Some(_)) => format!("{} (fetched from {url})", level(n.asn)),
            _ => "off (no asn_table)".to_string(),
        }
    );
    let _ = match (&cfg.store.backend, &cfg.store.valkey_address) {
        (super::store::StoreBackend::Valkey, Some(a)) => writeln!(
            out,
            "store: valkey at {a}, key prefix {:?}, hash {:?}",
            cfg.store.key_prefix, cfg.store.hash
        ),
        _ => writeln!(
            out,
            "store: embedded, state in {}, hash {:?}, at most {} identities",
            cfg.store.state_dir.display(),
            cfg.store.hash,
            cfg.store.max_identities
        ),
    };
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<24} {:<12} {:>5} {:<20} {:<10} {:<9}",
        "route", "methods", "cost", "limits", "over_quota", "key_limit"
    );
    for r in cfg
        .routes
        .routes
        .iter()
        .chain(std::iter::once(&cfg.routes.default))
    {
        let _ = writeln!(
            out,
            "{:<24} {:<12} {:>5} {:<20} {:<10} {:<9}",
            r.prefix.as_deref().unwrap_or("(default)"),
            r.methods
                .as_ref()
                .map_or("any".to_string(), |m| m.join(",")),
            r.cost,
            r.limits.describe(),
            r.over_quota.as_str(),
            r.key_limit
        );
    }
    if !cfg.env_applied.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "from the environment:");
        for (var, v) in &cfg.env_applied {
            let _ = writeln!(out, "  {var}={v}");
        }
    }
    out
}
