//! The PROXY protocol (v1 text and v2 binary, haproxy.org's `proxy-protocol.txt`) on proxy
//! listeners, `[http] proxy_protocol`: an L4 balancer (HAProxy `send-proxy-v2`, a cloud NLB)
//! writes the client's address ahead of the connection's bytes. The carried address then is the
//! connection's peer for everything after (identity, metering, lockouts).
//!
//! Accepted only from `[identity] trusted_proxies`: anyone else could name any address. From
//! another peer a header is refused and the connection closed; with `required` so is a trusted
//! peer's connection without one. `optional` serves a trusted peer's bare connection as is
//! (health checks). `LOCAL` (v2) and `UNKNOWN` (v1) keep the peer. Only the header's bytes are
//! read from the socket (peeked first), so the request behind it is untouched.
//!
//! Trust is decided before any wait. An untrusted peer is given one wait for its first bytes
//! (what the request's own reading would wait for anyway), and whatever they are, no more: a
//! header begun is refused at once, anything else is its request. A trusted peer's header may
//! come in pieces; each wait is for the bytes still missing, on readiness ([`super::peek`]),
//! never a timer, within `header_read_timeout` in all.
//!
//! A v2 header may carry TLVs after the addresses (cloud balancers send a few hundred bytes:
//! VPC endpoint IDs, TLS details); up to [`MAX_HEADER`] bytes are accepted, the rest of what
//! the format allows (16 + 65,535) is refused.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use super::peek::peek_at_least;

pub use crate::config::proxy_protocol::ProxyProtocol as Mode;

const V2_SIG: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// v1's longest line ("PROXY TCP6 " + two addresses + two ports + CRLF).
const V1_MAX: usize = 107;
/// The longest header accepted (a v2 header's fixed 16 bytes and its TLVs): 4 KiB, many
/// times what balancers send, a small buffer per connection while it is read.
pub const MAX_HEADER: usize = 4096;
/// Bytes that tell a header from a request: `PROXY ` (v1), or the start of v2's signature
/// (no HTTP request or TLS handshake starts with `\r\n\r\n\0\r`).
const TELLS: usize = 6;

/// What the first bytes of a connection say.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes are needed to tell.
    Incomplete,
    /// No PROXY header: the connection's own bytes start here.
    Absent,
    /// A header of this many bytes naming this source (None: LOCAL / UNKNOWN, keep the peer).
    Header(usize, Option<SocketAddr>),
    Invalid(&'static str),
}

/// Parses a header at the start of `b`.
pub fn parse(b: &[u8]) -> Parsed {
    if b.len() < V2_SIG.len() && V2_SIG.starts_with(b) || b.len() < 6 && b"PROXY ".starts_with(b) {
        return Parsed::Incomplete;
    }
    if b.starts_with(V2_SIG) {
        return parse_v2(b);
    }
    if b.starts_with(b"PROXY ") {
        return parse_v1(b);
    }
    Parsed::Absent
}

fn parse_v1(b: &[u8]) -> Parsed {
    let Some(end) = b.windows(2).take(V1_MAX - 1).position(|w| w == b"\r\n") else {
        return if b.len() >= V1_MAX {
            Parsed::Invalid("v1 line has no CRLF within 107 bytes")
        } else {
            Parsed::Incomplete
        };
    };
    let Ok(line) = std::str::from_utf8(&b[6..end]) else {
        return Parsed::Invalid("v1 line is not text");
    };
    let parts: Vec<&str> = line.split(' ').collect();
    match parts.as_slice() {
        ["UNKNOWN", ..] => Parsed::Header(end + 2, None),
        [fam @ ("TCP4" | "TCP6"), src, _dst, sport, _dport] => {
            let (Ok(ip), Ok(port)) = (src.parse::<IpAddr>(), sport.parse::<u16>()) else {
                return Parsed::Invalid("v1 source address or port");
            };
            if ip.is_ipv4() != (*fam == "TCP4") {
                return Parsed::Invalid("v1 address is not of its family");
            }
            Parsed::Header(end + 2, Some(SocketAddr::new(ip, port)))
        }
        _ => Parsed::Invalid("v1 line is not `PROXY TCP4|TCP6 src dst sport dport`"),
    }
}

fn parse_v2(b: &[u8]) -> Parsed {
    if b.len() < 16 {
        return Parsed::Incomplete;
    }
    let (ver_cmd, fam) = (b[12], b[13]);
    if ver_cmd >> 4 != 2 {
        return Parsed::Invalid("v2 version is not 2");
    }
    let len = usize::from(u16::from_be_bytes([b[14], b[15]]));
    let total = 16 + len;
    if total > MAX_HEADER {
        return Parsed::Invalid("v2 header longer than the 4096 bytes accepted");
    }
    if b.len() < total {
        return Parsed::Incomplete;
    }
    let body = &b[16..total];
    match ver_cmd & 0x0f {
        0 => return Parsed::Header(total, None),
        1 => {}
        _ => return Parsed::Invalid("v2 command is neither LOCAL nor PROXY"),
    }
    match fam >> 4 {
        1 if body.len() >= 12 => {
            let ip = Ipv4Addr::new(body[0], body[1], body[2], body[3]);
            let port = u16::from_be_bytes([body[8], body[9]]);
            Parsed::Header(total, Some(SocketAddr::new(IpAddr::V4(ip), port)))
        }
        2 if body.len() >= 36 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&body[..16]);
            let port = u16::from_be_bytes([body[32], body[33]]);
            Parsed::Header(
                total,
                Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(a)), port)),
            )
        }
        1 | 2 => Parsed::Invalid("v2 address block is too short"),
        // AF_UNSPEC / AF_UNIX: no client address to take.
        _ => Parsed::Header(total, None),
    }
}

/// The connection's client: reads a PROXY header off `stream` as `mode` and the peer's trust
/// (in `trusted_proxies`) allow. `Err` says why the connection is to be closed.
pub async fn accept(
    stream: &mut TcpStream,
    peer: SocketAddr,
    mode: Mode,
    trusted_proxies: &[ipnet::IpNet],
) -> Result<SocketAddr, &'static str> {
    if mode == Mode::Off {
        return Ok(peer);
    }
    if !crate::identity::client_ip::trusted(peer.ip(), trusted_proxies) {
        return untrusted(stream, peer).await;
    }
    let mut buf = vec![0u8; MAX_HEADER];
    let mut want = 1;
    loop {
        let n = peek_at_least(stream, &mut buf, want)
            .await
            .map_err(|_| "connection failed")?;
        if n == 0 {
            return Err("closed before any byte");
        }
        match parse(&buf[..n]) {
            // Fewer bytes than waited for: the peer closed its side.
            Parsed::Incomplete if n < want => return Err("closed within the PROXY header"),
            Parsed::Incomplete if n == buf.len() => return Err("PROXY header too long"),
            Parsed::Incomplete => want = missing(&buf[..n]),
            Parsed::Invalid(why) => return Err(why),
            Parsed::Absent if mode == Mode::Required => {
                return Err("no PROXY header (proxy_protocol = \"required\")");
            }
            Parsed::Absent => return Ok(peer),
            Parsed::Header(len, src) => {
                let mut skip = vec![0u8; len];
                stream
                    .read_exact(&mut skip)
                    .await
                    .map_err(|_| "connection failed")?;
                return Ok(src.unwrap_or(peer));
            }
        }
    }
}

/// The bytes to wait for after an incomplete `b`: a v2 header's whole length once its fixed
/// part is there, else one more (a v1 line's end is not known until it comes).
fn missing(b: &[u8]) -> usize {
    if b.len() >= 16 && b.starts_with(V2_SIG) {
        16 + usize::from(u16::from_be_bytes([b[14], b[15]]))
    } else {
        b.len() + 1
    }
}

/// A peer that may not send a header: one wait for its first bytes, then its verdict.
async fn untrusted(stream: &TcpStream, peer: SocketAddr) -> Result<SocketAddr, &'static str> {
    const REFUSED: &str = "PROXY header from a peer not in trusted_proxies";
    let mut buf = [0u8; 16];
    let n = peek_at_least(stream, &mut buf, 1)
        .await
        .map_err(|_| "connection failed")?;
    if n == 0 {
        return Err("closed before any byte");
    }
    match parse(&buf[..n]) {
        Parsed::Header(..) | Parsed::Invalid(_) => Err(REFUSED),
        Parsed::Incomplete if n >= TELLS => Err(REFUSED),
        // A request, or too few bytes to tell: the request's reader judges them.
        Parsed::Incomplete | Parsed::Absent => Ok(peer),
    }
}

/// [`accept`] within `timeout`, for the proxy's accept loop: the stream and its client, or
/// `None` (logged) when the connection is to be closed.
pub async fn client(
    mut stream: TcpStream,
    peer: SocketAddr,
    mode: Mode,
    trusted_proxies: &[ipnet::IpNet],
    timeout: std::time::Duration,
) -> Option<(TcpStream, SocketAddr)> {
    match tokio::time::timeout(timeout, accept(&mut stream, peer, mode, trusted_proxies)).await {
        Ok(Ok(client)) => Some((stream, client)),
        Ok(Err(why)) => {
            tracing::info!(%peer, why, "PROXY protocol: connection refused");
            None
        }
        Err(_) => {
            tracing::info!(%peer, "PROXY protocol: no header within header_read_timeout");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
        let mut v = V2_SIG.to_vec();
        v.push(0x20 | cmd);
        v.push(fam);
        v.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn v1_lines() {
        let head = b"PROXY TCP4 203.0.113.7 10.0.0.1 5555 80\r\n";
        let l = [&head[..], b"GET / HTTP/1.1\r\n"].concat();
        assert_eq!(
            parse(&l),
            Parsed::Header(head.len(), Some("203.0.113.7:5555".parse().unwrap()))
        );
        let l6 = b"PROXY TCP6 2001:db8::1 ::1 1 2\r\n";
        assert_eq!(
            parse(l6),
            Parsed::Header(l6.len(), Some("[2001:db8::1]:1".parse().unwrap()))
        );
        assert_eq!(parse(b"PROXY UNKNOWN\r\n"), Parsed::Header(15, None));
        assert_eq!(parse(b"PROXY TCP4 1.2.3.4"), Parsed::Incomplete);
        assert_eq!(parse(b"PRO"), Parsed::Incomplete);
        assert!(matches!(
            parse(b"PROXY TCP4 2001:db8::1 ::1 1 2\r\n"),
            Parsed::Invalid(_)
        ));
        assert!(matches!(
            parse(b"PROXY TCP4 x y 1 2\r\n"),
            Parsed::Invalid(_)
        ));
        assert!(matches!(parse(&[b'P'; 200]), Parsed::Absent));
        let mut long = b"PROXY ".to_vec();
        long.extend(std::iter::repeat_n(b'1', 200));
        assert!(matches!(parse(&long), Parsed::Invalid(_)));
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Parsed::Absent);
    }

    #[test]
    fn v2_headers() {
        let mut body = vec![203, 0, 113, 9, 10, 0, 0, 1];
        body.extend_from_slice(&4242u16.to_be_bytes());
        body.extend_from_slice(&80u16.to_be_bytes());
        body.extend_from_slice(&[1, 0, 1, 0]); // a TLV after the addresses
        let h = v2(1, 0x11, &body);
        assert_eq!(
            parse(&h),
            Parsed::Header(h.len(), Some("203.0.113.9:4242".parse().unwrap()))
        );
        assert_eq!(parse(&h[..h.len() - 1]), Parsed::Incomplete);
        assert_eq!(parse(&h[..5]), Parsed::Incomplete);
        assert_eq!(parse(&v2(0, 0, &[])), Parsed::Header(16, None));
        let mut b6 = vec![0x20, 0x01, 0x0d, 0xb8];
        b6.extend_from_slice(&[0; 12]);
        b6.extend_from_slice(&[0; 16]);
        b6.extend_from_slice(&[0, 7, 0, 80]);
        assert_eq!(
            parse(&v2(1, 0x21, &b6)),
            Parsed::Header(52, Some("[2001:db8::]:7".parse().unwrap()))
        );
        assert!(matches!(parse(&v2(1, 0x11, &[1, 2])), Parsed::Invalid(_)));
        assert!(matches!(parse(&v2(5, 0x11, &body)), Parsed::Invalid(_)));
        let mut bad = h.clone();
        bad[12] = 0x11;
        assert!(matches!(parse(&bad), Parsed::Invalid(_)));
    }

    /// Issue 35, D10: TLVs of a few KiB (cloud balancers') are accepted up to 4 KiB in all;
    /// 552 bytes was the most before.
    #[test]
    fn v2_headers_with_kilobytes_of_tlvs() {
        let mut body = vec![203, 0, 113, 9, 10, 0, 0, 1];
        body.extend_from_slice(&4242u16.to_be_bytes());
        body.extend_from_slice(&80u16.to_be_bytes());
        body.extend(tlvs(2048));
        let h = v2(1, 0x11, &body);
        assert!(h.len() > 2048);
        assert_eq!(
            parse(&h),
            Parsed::Header(h.len(), Some("203.0.113.9:4242".parse().unwrap()))
        );
        assert_eq!(parse(&h[..100]), Parsed::Incomplete);
        let mut most = vec![0u8; 12];
        most.extend(tlvs(MAX_HEADER - 16 - 12));
        let h = v2(1, 0x11, &most);
        assert_eq!(h.len(), MAX_HEADER);
        assert!(matches!(parse(&h), Parsed::Header(MAX_HEADER, _)));
        // One byte more is refused from its length alone, before the rest is read.
        let mut over = vec![0u8; 12];
        over.extend(tlvs(MAX_HEADER - 16 - 12 + 1));
        assert!(matches!(
            parse(&v2(1, 0x11, &over)[..16]),
            Parsed::Invalid(_)
        ));
    }

    /// `PP2_TYPE_NOOP` TLVs filling `n` bytes.
    fn tlvs(n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        while out.len() < n {
            let room = (n - out.len()).min(3 + 255);
            let len = room.saturating_sub(3);
            out.push(0x04);
            out.extend_from_slice(&u16::try_from(len).unwrap().to_be_bytes());
            out.extend(std::iter::repeat_n(0u8, len));
            if room < 3 {
                out.truncate(n);
            }
        }
        out
    }

    /// A connection to a loopback listener: (client side, server side, the peer address).
    async fn pair(from: &str) -> (TcpStream, TcpStream, SocketAddr) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind(SocketAddr::new(from.parse().unwrap(), 0))
            .unwrap();
        let c = sock.connect(l.local_addr().unwrap()).await.unwrap();
        let (s, peer) = l.accept().await.unwrap();
        (c, s, peer)
    }

    fn loopback() -> Vec<ipnet::IpNet> {
        vec!["127.0.0.1/32".parse().unwrap()]
    }

    /// Issue 35, D7: a trusted peer's partial header is waited for on readiness: a handful of
    /// polls, where peeking every millisecond polled hundreds of times in 300 ms.
    #[tokio::test]
    async fn a_partial_header_is_waited_for_not_polled() {
        use std::future::Future;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::AsyncWriteExt;

        let (mut c, mut s, peer) = pair("127.0.0.1").await;
        c.write_all(b"PROXY TCP4 203.0").await.unwrap();
        let trusted = loopback();
        let polls = AtomicUsize::new(0);
        {
            let mut fut = std::pin::pin!(accept(&mut s, peer, Mode::Required, &trusted));
            let counted = std::future::poll_fn(|cx| {
                polls.fetch_add(1, Ordering::Relaxed);
                fut.as_mut().poll(cx)
            });
            let waited = tokio::time::timeout(std::time::Duration::from_millis(300), counted).await;
            assert!(waited.is_err(), "{waited:?}");
        }
        let polls = polls.into_inner();
        assert!(polls <= 5, "{polls} polls in 300 ms");
        // The rest of the header, and the request behind it, which stays on the socket.
        c.write_all(b".113.7 10.0.0.1 5555 80\r\nGET / HTTP/1.1\r\n")
            .await
            .unwrap();
        // (The bytes already peeked are still there: the header is read from the start.)
        let client = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            accept(&mut s, peer, Mode::Required, &trusted),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(client, "203.0.113.7:5555".parse().unwrap());
        let mut rest = [0u8; 16];
        s.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"GET / HTTP/1.1\r\n");
    }

    /// Issue 35, D7: an untrusted peer is not waited on for a header: a first byte that could
    /// begin one is handed on as its request at once (it used to wait for more, up to
    /// `header_read_timeout`), and a header it sends whole is refused.
    #[tokio::test]
    async fn an_untrusted_peer_is_not_waited_for() {
        use tokio::io::AsyncWriteExt;

        let trusted = loopback();
        let (mut c, mut s, peer) = pair("127.0.0.2").await;
        c.write_all(b"PRO").await.unwrap();
        let got = tokio::time::timeout(
            std::time::Duration::from_millis(500),
            accept(&mut s, peer, Mode::Optional, &trusted),
        )
        .await
        .expect("decided without waiting for more bytes");
        assert_eq!(got, Ok(peer));
        let (mut c, mut s, peer) = pair("127.0.0.2").await;
        c.write_all(b"PROXY TCP4 203.0.113.7 10.0.0.1 5555 80\r\n")
            .await
            .unwrap();
        let got = accept(&mut s, peer, Mode::Required, &trusted).await;
        assert_eq!(got, Err("PROXY header from a peer not in trusted_proxies"));
    }

    /// Issue 35, D10: a v2 header with 2 KiB of TLVs, read off a real socket.
    #[tokio::test]
    async fn a_v2_header_with_tlvs_names_the_client() {
        use tokio::io::AsyncWriteExt;

        let (mut c, mut s, peer) = pair("127.0.0.1").await;
        let mut body = vec![198, 51, 100, 20, 10, 0, 0, 1];
        body.extend_from_slice(&6000u16.to_be_bytes());
        body.extend_from_slice(&443u16.to_be_bytes());
        body.extend(tlvs(2048));
        let mut wire = v2(1, 0x11, &body);
        wire.extend_from_slice(b"GET");
        c.write_all(&wire).await.unwrap();
        let got = accept(&mut s, peer, Mode::Required, &loopback()).await;
        assert_eq!(got, Ok("198.51.100.20:6000".parse().unwrap()));
        let mut rest = [0u8; 3];
        s.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"GET");
    }

    /// Any bytes: never a panic, and a header never claims more bytes than it was given.
    #[test]
    fn arbitrary_bytes_are_safe() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = usize::try_from(seed % 80).unwrap();
            let mut b: Vec<u8> = if seed & 1 == 0 {
                V2_SIG.to_vec()
            } else {
                b"PROXY ".to_vec()
            };
            let mut s = seed;
            for _ in 0..len {
                s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                b.push((s >> 33) as u8);
            }
            if let Parsed::Header(n, _) = parse(&b) {
                assert!(n <= b.len());
            }
        }
    }
}
