//! An operator's lockout of a whole autonomous system (the operator page's lock button on an
//! ASN row, `POST /admin/v1/lockouts` with `"ip": "AS64496"`): every range the IP-to-ASN table
//! in force gives the AS, written as the CIDRs that cover it exactly, each an operator's range
//! lockout (the deny trie with its deadline, as a CIDR lockout is; a one-address range an
//! address's lockout). Nothing new in the store or the kernel: the AS is only the way the
//! ranges were chosen.
//!
//! - Each range lockout's reason starts with [`reason_mark`] (`AS64496: `), so the lockouts an
//!   AS made are found again by what the daemon wrote, not by the table: a table refreshed
//!   between the lock and the unlock still unlocks every range that was locked.
//! - At most [`MAX_ASN_CIDRS`] CIDRs: a large AS (a cloud's) spans thousands, which would fill
//!   the kernel's deny trie (16,384 entries) and lock far more than the traffic seen; it is
//!   refused, naming how many it spans.
//! - Every CIDR is checked (prefix bounds, trusted proxies) before any is written, so a refused
//!   AS locks nothing.

use std::time::Duration;

use ipnet::IpNet;

use super::base::Engine;
use super::error::EngineError;
use super::exempt::trusted_proxy_in;
use super::lockouts::{LockTarget, LockoutItem};
use super::networks::all_range_cidrs;

/// CIDRs one AS lockout may write.
pub const MAX_ASN_CIDRS: usize = 256;

/// What starts the reason of every range lockout made for `asn`.
pub fn reason_mark(asn: u32) -> String {
    format!("AS{asn}: ")
}

impl Engine {
    /// The CIDRs covering `asn`'s ranges in the table in force, checked as lockout targets (a
    /// one-address range is an address's lockout).
    pub fn asn_cidrs(&self, asn: u32) -> Result<Vec<LockTarget>, EngineError> {
        let cfg = self.config();
        let ranges = cfg
            .networks
            .asn_table
            .as_ref()
            .map(|t| t.ranges_of(asn))
            .unwrap_or_default();
        if ranges.is_empty() {
            return Err(EngineError::AsnUnknown { asn });
        }
        let cidrs: Vec<IpNet> = ranges
            .iter()
            .flat_map(|r| all_range_cidrs(r.start, r.end))
            .collect();
        if cidrs.len() > MAX_ASN_CIDRS {
            return Err(EngineError::AsnTooWide {
                asn,
                cidrs: cidrs.len(),
                max: MAX_ASN_CIDRS,
            });
        }
        cidrs
            .into_iter()
            .map(|net| {
                if let Some(proxy) = trusted_proxy_in(&cfg, &net) {
                    return Err(EngineError::TrustedProxy { net, proxy });
                }
                LockTarget::of(net)
            })
            .collect()
    }

    /// Locks every range of `asn` for `duration`, store and kernel; the lockouts made.
    pub fn lock_asn(
        &self,
        asn: u32,
        duration: Duration,
        reason: &str,
    ) -> Result<Vec<LockoutItem>, EngineError> {
        let reason = format!("{}{reason}", reason_mark(asn));
        self.asn_cidrs(asn)?
            .into_iter()
            .map(|target| self.lockouts().lock_target(target, duration, &reason))
            .collect()
    }

    /// Lifts every range lockout `asn`'s lock made (found by [`reason_mark`]); how many.
    pub fn lift_asn(&self, asn: u32) -> Result<usize, EngineError> {
        let mark = reason_mark(asn);
        let l = self.lockouts();
        let mut lifted = 0;
        for item in l.all()? {
            if item.reason.starts_with(&mark) && l.lift_target(LockTarget::of(item.net)?)? {
                lifted += 1;
            }
        }
        Ok(lifted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_mark_names_the_as() {
        assert_eq!(reason_mark(64496), "AS64496: ");
    }
}
