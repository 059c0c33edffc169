//! Identity hashing: nothing identifying (IP, token ID, key ID, key secret) reaches the store
//! or a log unhashed. HMAC-SHA256 with a secret by default; plain SHA-256 only when configured.

use std::cell::RefCell;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::model::{IdentityText, NetworkName, Tier};

/// What kind of subject a counter belongs to; part of the key so namespaces never collide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Namespace {
    /// Client IP (grouped), `quota:ip:<hash>` in the quota document.
    Ip = 1,
    /// Bearer token ID (`jti`, else `sub`), `quota:tid:<hash>`.
    Token = 2,
    /// Verified API key ID.
    Key = 3,
    /// The `attempt(identity, now)` compatibility call.
    Compat = 4,
    /// A caller's network prefix (`[networks]`: IPv4 /24, IPv6 /48 by default).
    Net = 5,
    /// A caller's autonomous system (`[networks] asn_table`).
    Asn = 6,
    /// The unattributed callers of a trusted proxy (its address): forwarded requests whose
    /// forwarding field named no usable client.
    Via = 7,
    /// A verified signed agent (Web Bot Auth): its directory URL.
    Agent = 8,
}

impl Namespace {
    pub fn as_str(self) -> &'static str {
        match self {
            Namespace::Ip => "ip",
            Namespace::Token => "tid",
            Namespace::Key => "key",
            Namespace::Compat => "compat",
            Namespace::Net => "net",
            Namespace::Asn => "asn",
            Namespace::Via => "via",
            Namespace::Agent => "agent",
        }
    }

    /// The namespace an [`IdKey`]'s first byte names (unknown bytes read as `compat`).
    pub fn from_byte(b: u8) -> Namespace {
        match b {
            1 => Namespace::Ip,
            2 => Namespace::Token,
            3 => Namespace::Key,
            5 => Namespace::Net,
            6 => Namespace::Asn,
            7 => Namespace::Via,
            8 => Namespace::Agent,
            _ => Namespace::Compat,
        }
    }
}

/// A hashed subject: namespace byte + the whole 32-byte digest. This is what stores key counters
/// by: a remote store names keys with all 64 hex digits (so `printf %s IP | sha256sum` finds a
/// caller in `sha256` mode); the embedded store keeps a prefix of it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct IdKey(pub [u8; IdKey::LEN]);

impl IdKey {
    /// The namespace byte and the digest.
    pub const LEN: usize = 33;

    /// A key from its leading bytes (a store that keeps a prefix), the rest zero.
    pub fn from_prefix(bytes: &[u8]) -> IdKey {
        let mut k = [0u8; IdKey::LEN];
        let n = bytes.len().min(IdKey::LEN);
        k[..n].copy_from_slice(&bytes[..n]);
        IdKey(k)
    }
    /// The whole digest as 64 lowercase hex digits (what remote store keys carry).
    pub fn digest_hex(&self) -> String {
        hex::encode(&self.0[1..])
    }
    pub fn namespace_byte(&self) -> u8 {
        self.0[0]
    }
    /// `ip:3fa2…` (16 hex digits): stable, loggable, not reversible without the secret.
    pub fn display(&self) -> String {
        self.text().to_string()
    }
    /// [`IdKey::display`] without a heap allocation: this runs for every decision.
    pub fn text(&self) -> IdentityText {
        let ns = Namespace::from_byte(self.0[0]).as_str();
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut buf = [0u8; 23];
        buf[..ns.len()].copy_from_slice(ns.as_bytes());
        buf[ns.len()] = b':';
        let mut n = ns.len() + 1;
        for b in &self.0[1..9] {
            buf[n] = HEX[usize::from(b >> 4)];
            buf[n + 1] = HEX[usize::from(b & 0xf)];
            n += 2;
        }
        // ASCII throughout.
        IdentityText::new(std::str::from_utf8(&buf[..n]).unwrap_or_default())
    }
    /// The digest as a 64-bit number (already uniformly distributed; used for sharding).
    pub fn as_u64(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[1..9]);
        u64::from_le_bytes(b)
    }
}

impl std::fmt::Debug for IdKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display())
    }
}

impl Hash for IdKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The bytes are a cryptographic digest: feeding 8 of them is as good as a hash function.
        state.write_u64(self.as_u64() ^ u64::from(self.0[0]).rotate_left(56));
    }
}

/// A pass-through hasher for [`IdKey`] maps.
#[derive(Clone, Copy, Default)]
pub struct IdKeyHasher(u64);

impl Hasher for IdKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only reached for non-IdKey use; fold bytes in so it stays a hash.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

pub type IdKeyBuildHasher = std::hash::BuildHasherDefault<IdKeyHasher>;

/// Hashes subjects and key secrets. Cheap to clone (the HMAC key schedule is precomputed).
#[derive(Clone)]
pub struct IdentityHasher {
    kind: Kind,
    /// Names this hasher's secret in the per-thread memo of address keys (clones share it).
    tag: u64,
}

#[derive(Clone)]
enum Kind {
    Hmac(Hmac<Sha256>),
    Sha256,
}

static NEXT_TAG: AtomicU64 = AtomicU64::new(1);

/// Slots of the per-thread memo of address keys.
const MEMO_SLOTS: usize = 256;

thread_local! {
    /// Recently hashed client addresses, direct-mapped: a crawler sends many requests from one
    /// address, and each would otherwise cost an HMAC (two SHA-256 blocks) and a text render.
    static IP_MEMO: RefCell<Vec<Option<(u64, IpAddr, IdKey)>>> =
        RefCell::new(vec![None; MEMO_SLOTS]);
    /// The same for networks: a crawler's many addresses share one network key.
    static NET_MEMO: RefCell<Vec<Option<NetMemo>>> = RefCell::new(vec![None; MEMO_SLOTS]);
}

/// A remembered network key: the hasher's tag, the network, the rung whose share it is.
type NetMemo = (u64, NetworkName, Tier, IdKey);

fn net_memo_slot(net: &NetworkName, tier: Tier) -> usize {
    (match net {
        NetworkName::Prefix(n) => memo_slot(n.addr()) ^ usize::from(n.prefix_len()),
        NetworkName::Asn(a) => memo_slot(IpAddr::from(a.to_be_bytes())),
    } ^ tier.index())
    .min(MEMO_SLOTS - 1)
}

fn memo_slot(ip: IpAddr) -> usize {
    let folded = match ip {
        IpAddr::V4(v4) => u64::from(u32::from(v4)),
        IpAddr::V6(v6) => {
            let b = u128::from(v6);
            (b as u64) ^ ((b >> 64) as u64)
        }
    };
    // Fibonacci hashing: the top bits of the product are well mixed.
    (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % MEMO_SLOTS
}

impl std::fmt::Debug for IdentityHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            Kind::Hmac(_) => f.write_str("IdentityHasher::Hmac(<secret>)"),
            Kind::Sha256 => f.write_str("IdentityHasher::Sha256"),
        }
    }
}

impl IdentityHasher {
    pub fn hmac(secret: &[u8]) -> Self {
        // HMAC accepts keys of any length; this cannot fail.
        let mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes any key length");
        IdentityHasher {
            kind: Kind::Hmac(mac),
            tag: NEXT_TAG.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Plain SHA-256 (`store.hash = "sha256"`).
    pub fn sha256() -> Self {
        IdentityHasher {
            kind: Kind::Sha256,
            tag: NEXT_TAG.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// SHA-256 of `data` (plain mode: exactly the quota document's `sha256(ip)`), or
    /// HMAC-SHA256 of `namespace || data`.
    pub fn digest(&self, ns: Namespace, data: &[u8]) -> [u8; 32] {
        match &self.kind {
            Kind::Hmac(mac) => {
                let mut m = mac.clone();
                m.update(&[ns as u8]);
                m.update(data);
                m.finalize().into_bytes().into()
            }
            Kind::Sha256 => Sha256::digest(data).into(),
        }
    }

    pub fn id(&self, ns: Namespace, data: &[u8]) -> IdKey {
        let d = self.digest(ns, data);
        let mut k = [0u8; IdKey::LEN];
        k[0] = ns as u8;
        k[1..].copy_from_slice(&d);
        IdKey(k)
    }

    /// The key of a (grouped) client address: the hash of its text form. Runs for every
    /// request, so recent answers are remembered per thread.
    pub fn ip_id(&self, ip: IpAddr) -> IdKey {
        let slot = memo_slot(ip);
        let hit = IP_MEMO.with_borrow(|memo| match memo[slot] {
            Some((tag, seen, key)) if tag == self.tag && seen == ip => Some(key),
            _ => None,
        });
        if let Some(key) = hit {
            return key;
        }
        let key = self.ip_id_uncached(ip);
        IP_MEMO.with_borrow_mut(|memo| memo[slot] = Some((self.tag, ip, key)));
        key
    }

    /// The key of rung `tier`'s share of a network: the hash of its text form under its own
    /// namespace, `203.0.113.0/24` or `AS64500` for the anonymous share (the key a network had
    /// before rungs had shares), `203.0.113.0/24 session` for another rung's. Remembered per
    /// thread like addresses.
    pub fn net_id(&self, net: NetworkName, tier: Tier) -> IdKey {
        let slot = net_memo_slot(&net, tier);
        let hit = NET_MEMO.with_borrow(|memo| match memo[slot] {
            Some((tag, seen, t, key)) if tag == self.tag && seen == net && t == tier => Some(key),
            _ => None,
        });
        if let Some(key) = hit {
            return key;
        }
        let ns = match net {
            NetworkName::Prefix(_) => Namespace::Net,
            NetworkName::Asn(_) => Namespace::Asn,
        };
        let text = match tier {
            Tier::Anon => net.to_string(),
            t => format!("{net} {}", t.as_str()),
        };
        let key = self.id(ns, text.as_bytes());
        NET_MEMO.with_borrow_mut(|memo| memo[slot] = Some((self.tag, net, tier, key)));
        key
    }

    /// [`Self::ip_id`] without the memo; the text is rendered on the stack.
    fn ip_id_uncached(&self, ip: IpAddr) -> IdKey {
        use std::io::Write as _;
        // The longest IPv6 text form is 45 bytes.
        let mut buf = [0u8; 48];
        let mut cur = std::io::Cursor::new(&mut buf[..]);
        match write!(cur, "{ip}") {
            Ok(()) => {
                let len = usize::try_from(cur.position()).unwrap_or(0);
                self.id(Namespace::Ip, &buf[..len])
            }
            Err(_) => self.id(Namespace::Ip, ip.to_string().as_bytes()),
        }
    }

    /// How an API key secret is stored: hex of a digest under its own domain byte, so a stored
    /// hash is never the same value as any counter key.
    pub fn secret_hash(&self, secret: &str) -> [u8; 32] {
        match &self.kind {
            Kind::Hmac(mac) => {
                let mut m = mac.clone();
                m.update(b"\xffapi-key-secret");
                m.update(secret.as_bytes());
                m.finalize().into_bytes().into()
            }
            Kind::Sha256 => {
                let mut h = Sha256::new();
                h.update(b"\xffapi-key-secret");
                h.update(secret.as_bytes());
                h.finalize().into()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_the_namespace_and_16_hex_digits() {
        let k = IdKey::from_prefix(&[
            1, 0x00, 0x0f, 0xa0, 0xff, 0x12, 0x34, 0x56, 0x78, 9, 9, 9, 9, 9, 9, 9,
        ]);
        assert_eq!(k.display(), "ip:000fa0ff12345678");
        let k = IdKey::from_prefix(&[3, 0xab, 0, 0, 0, 0, 0, 0, 0xcd]);
        assert_eq!(k.display(), "key:ab000000000000cd");
    }

    #[test]
    fn ip_id_hashes_the_text_form() {
        let h = IdentityHasher::hmac(b"0123456789abcdef");
        for ip in [
            "203.0.113.7",
            "2001:db8::",
            "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255",
        ] {
            let addr: IpAddr = ip.parse().unwrap();
            let expected = h.id(Namespace::Ip, addr.to_string().as_bytes());
            assert_eq!(h.ip_id(addr), expected, "{ip}");
            // Again, from the memo.
            assert_eq!(h.ip_id(addr), expected, "{ip}");
        }
    }

    #[test]
    fn the_memo_never_answers_for_another_secret_or_address() {
        let a = IdentityHasher::hmac(b"secret a");
        let b = IdentityHasher::hmac(b"secret b");
        let ip: IpAddr = "198.51.100.9".parse().unwrap();
        let from_a = a.ip_id(ip);
        assert_eq!(b.ip_id(ip), b.id(Namespace::Ip, b"198.51.100.9"));
        assert_ne!(b.ip_id(ip), from_a);
        assert_eq!(a.clone().ip_id(ip), from_a, "clones share the secret");
        // Addresses that share a memo slot still get their own keys.
        let other = (0u32..)
            .map(|i| IpAddr::from(std::net::Ipv4Addr::from(i)))
            .find(|o| *o != ip && memo_slot(*o) == memo_slot(ip))
            .unwrap();
        assert_eq!(
            a.ip_id(other),
            a.id(Namespace::Ip, other.to_string().as_bytes())
        );
        assert_eq!(a.ip_id(ip), from_a);
    }

    #[test]
    fn namespaces_never_share_a_key() {
        let h = IdentityHasher::sha256();
        assert_ne!(h.id(Namespace::Ip, b"x"), h.id(Namespace::Token, b"x"));
    }

    #[test]
    fn hmac_depends_on_the_secret() {
        let a = IdentityHasher::hmac(b"0123456789abcdef");
        let b = IdentityHasher::hmac(b"0123456789abcdeg");
        assert_ne!(
            a.id(Namespace::Ip, b"1.2.3.4"),
            b.id(Namespace::Ip, b"1.2.3.4")
        );
        assert_eq!(
            a.id(Namespace::Ip, b"1.2.3.4"),
            a.clone().id(Namespace::Ip, b"1.2.3.4")
        );
    }

    #[test]
    fn the_key_carries_the_whole_digest() {
        let h = IdentityHasher::sha256();
        let k = h.id(Namespace::Ip, b"203.0.113.7");
        assert_eq!(k.digest_hex(), hex::encode(Sha256::digest(b"203.0.113.7")));
        assert_eq!(k.digest_hex().len(), 64);
    }

    #[test]
    fn plain_mode_is_sha256_of_the_subject() {
        let d = IdentityHasher::sha256().digest(Namespace::Ip, b"203.0.113.7");
        assert_eq!(d.as_slice(), Sha256::digest(b"203.0.113.7").as_slice());
    }
}
