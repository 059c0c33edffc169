//! Upgrade pass-through (WebSocket and any other `Upgrade` but `h2c`): [`upgrade_of`] tells
//! an upgrade request apart, [`open`] sends it upstream on a connection of its own and, when
//! the upstream answers `101`, joins the two connections ([`join`]); [`registry`] bounds and
//! counts the tunnels, [`lockout`] closes those of callers locked out while they are open.
//!
//! The request is decided once, at the upgrade, like any other (both request paths hand an
//! upgrade to hyper's server, which gives up the connection once the `101` is written).

pub mod join;
pub mod lockout;
pub mod open;
pub mod registry;

use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING, UPGRADE};
use http::Request;

use crate::edge::h1::framing::lists_token;

/// What a request's `Upgrade` asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Upgrade {
    /// No upgrade (or one not announced in `Connection`): an ordinary request.
    None,
    /// `h2c`: never tunnelled; answered over HTTP/1.1 with `Upgrade` dropped.
    H2c,
    /// Anything else (`websocket`): tunnelled once the upstream agrees.
    Tunnel,
}

/// Whether `req` asks to upgrade, and to what. A request with a body is not tunnelled: an
/// upgrade rides on a bodyless request (RFC 6455 §4.1), and one with a body is answered as an
/// ordinary request.
pub fn upgrade_of<B>(req: &Request<B>) -> Upgrade {
    let h = req.headers();
    let Some(up) = h.get(UPGRADE) else {
        return Upgrade::None;
    };
    let announced = h
        .get_all(CONNECTION)
        .iter()
        .any(|c| lists_token(c.as_bytes(), "upgrade"));
    if !announced || req.version() != http::Version::HTTP_11 {
        return Upgrade::None;
    }
    if up
        .as_bytes()
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"h2c"))
    {
        return Upgrade::H2c;
    }
    let has_body = h.contains_key(TRANSFER_ENCODING)
        || h.get(CONTENT_LENGTH).is_some_and(|v| v.as_bytes() != b"0");
    if has_body {
        return Upgrade::None;
    }
    Upgrade::Tunnel
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(fields: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::get("/ws");
        for (k, v) in fields {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn upgrades_are_told_apart() {
        let ws = [
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket"),
        ];
        assert_eq!(upgrade_of(&req(&ws)), Upgrade::Tunnel);
        assert_eq!(
            upgrade_of(&req(&[
                ("connection", "Upgrade, HTTP2-Settings"),
                ("upgrade", "h2c")
            ])),
            Upgrade::H2c
        );
        assert_eq!(upgrade_of(&req(&[("upgrade", "websocket")])), Upgrade::None);
        assert_eq!(
            upgrade_of(&req(&[("connection", "upgrade")])),
            Upgrade::None
        );
        let mut with_body = ws.to_vec();
        with_body.push(("content-length", "3"));
        assert_eq!(upgrade_of(&req(&with_body)), Upgrade::None);
    }
}
