//! The names of every Valkey key, in one place (the quota document's layout, under the
//! configured prefix):
//!
//! - `quota:{ip:<64 hex>}`: the daily count (TTL past the UTC day end), and beside it
//!   `…:ts` (first seen today, ISO 8601, same TTL), `…:h:<hour index>` (hourly),
//!   `…:kh:<hour index>` (a key's own hourly units), `…:burst` (the sliding burst window, a
//!   hash of 5 s slots). `{tid:…}` for token holders, `{key:…}` for API key holders.
//! - `lockout:{ip:<hex>}` and `strikes:{ip:<hex>}` (JSON, with TTLs), `key:<id>` (a hash per
//!   API key), `list:allow` / `list:deny` (hashes), `hash-secret`, `lockouts` (the stream).
//!
//! The identity is the hash tag, so one identity's keys share a cluster slot and one script
//! reaches them all.

use std::time::{Duration, UNIX_EPOCH};

use crate::identity::hash::{IdKey, Namespace};
use crate::model::{ListKind, PerWindow, Shape, WindowKind};
use crate::store::windows;

/// The key names of one store (its prefix).
#[derive(Clone, Debug)]
pub struct Layout {
    prefix: String,
}

impl Layout {
    pub fn new(prefix: &str) -> Layout {
        Layout {
            prefix: prefix.to_string(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `<prefix><rest>`.
    pub fn name(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    /// `{ip:<hex>}`: the identity's hash tag, with the whole digest.
    pub fn tag(id: &IdKey) -> String {
        let ns = Namespace::from_byte(id.namespace_byte()).as_str();
        format!("{{{ns}:{}}}", id.digest_hex())
    }

    /// `<prefix>quota:{ip:<hex>}`: the identity's daily count, and the stem of its other keys.
    pub fn quota(&self, id: &IdKey) -> String {
        format!("{}quota:{}", self.prefix, Self::tag(id))
    }

    /// `<quota key>:ts`: first seen today.
    pub fn first_seen(&self, id: &IdKey) -> String {
        format!("{}:ts", self.quota(id))
    }

    /// One key per window: the daily count is the quota key itself (the script starts it over
    /// when `:ts` names another day); other fixed windows carry their index; the sliding burst
    /// is one hash.
    pub fn windows(&self, id: &IdKey, now_ms: u64) -> PerWindow<String> {
        let base = self.quota(id);
        PerWindow::from_fn(|k| {
            let spec = k.spec();
            match spec.shape {
                _ if k == WindowKind::Daily => base.clone(),
                Shape::Sliding => format!("{base}:{}", spec.store_key),
                Shape::Fixed => format!(
                    "{base}:{}:{}",
                    spec.store_key,
                    windows::index(now_ms, spec.span_ms)
                ),
            }
        })
    }

    /// `<prefix>lockout:{ip:<hex>}` for the address whose key is `ip`.
    pub fn lockout(&self, ip: &IdKey) -> String {
        format!("{}lockout:{}", self.prefix, Self::tag(ip))
    }

    pub fn strikes(&self, ip: &IdKey) -> String {
        format!("{}strikes:{}", self.prefix, Self::tag(ip))
    }

    pub fn key_record(&self, id: &str) -> String {
        format!("{}key:{id}", self.prefix)
    }

    pub fn list(&self, kind: ListKind) -> String {
        self.name(&format!("list:{kind:?}").to_lowercase())
    }

    pub fn secret(&self) -> String {
        self.name("hash-secret")
    }

    /// The lockout stream every host follows.
    pub fn stream(&self) -> String {
        self.name("lockouts")
    }
}

/// `now_ms` as ISO 8601 in UTC: the `:ts` value, and how a count tells one day from the next.
pub fn iso8601(now_ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(now_ms)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_is_utc_with_the_date_first() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_798_761_600_000 + 1), "2027-01-01T00:00:00.001Z");
    }
    use crate::identity::hash::{IdentityHasher, Namespace};

    #[test]
    fn keys_carry_the_whole_digest_in_the_hash_tag() {
        let h = IdentityHasher::sha256();
        let id = h.id(Namespace::Ip, b"203.0.113.9");
        let l = Layout::new("p:");
        let hex = id.digest_hex();
        assert_eq!(l.quota(&id), format!("p:quota:{{ip:{hex}}}"));
        assert_eq!(l.first_seen(&id), format!("p:quota:{{ip:{hex}}}:ts"));
        let w = l.windows(&id, 3_600_000 * 5 + 1);
        assert_eq!(w[WindowKind::Daily], l.quota(&id));
        assert_eq!(w[WindowKind::Hourly], format!("p:quota:{{ip:{hex}}}:h:5"));
        assert_eq!(w[WindowKind::Burst], format!("p:quota:{{ip:{hex}}}:burst"));
        assert_eq!(l.lockout(&id), format!("p:lockout:{{ip:{hex}}}"));
    }
}
