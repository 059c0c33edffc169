//! A held request on the client's raw connection, keeping nothing but what the wait needs.
//!
//! A held request waits seconds to a minute, and scanners keep thousands waiting, so what each
//! one keeps meanwhile is the cost of delay mode: its decision, its timer, its socket and the
//! bytes it arrived with. Both kinds of request the proxy reads itself hold here:
//! - the own loop's ([`crate::proxy::front`]), after it has given back its read and write buffers;
//! - a request the loop hands to hyper's server (a body, HTTP/1.0, …), decided here before
//!   hyper's connection exists: hyper allocates 8 KiB to write and 8 KiB to read per
//!   connection, more than a held request may cost. hyper then gets the decision with the
//!   request instead of deciding again.
//!
//! A request still held when the shutdown grace period ends is answered 503 (see
//! [`crate::edge::steps::Steps::hold`]) and its connection closed; a client that hangs up while held frees
//! its slot at once.

use std::net::IpAddr;
use std::time::Duration;

use bytes::BytesMut;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Response, Uri};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::edge::h1::write::write_answer;
use crate::edge::overload::Slot;
use crate::edge::steps::hold::HoldPermit;
use crate::engine::decider::RequestView;
use crate::identity::client_ip::Client;
use crate::model::Decision;
use crate::proxy::hyper::{admit, Admission, ProxyState};
use crate::proxy::inspect::MAX_FIELDS;
use crate::proxy::request_rules;

/// How long the request bytes still in flight are read off after a closing answer (see
/// [`answer_and_close`]).
const LINGER: Duration = Duration::from_secs(1);

/// How a hold ended.
#[expect(
    clippy::large_enum_variant,
    reason = "matched at once by the caller; boxing would allocate per held request"
)]
pub(crate) enum Waited {
    /// The delay is over: forward the request in this slot.
    Forward(Decision, Slot),
    /// The client hung up, or was answered 503 (the shutdown grace period ended, or the
    /// upstream is too busy for its tier).
    Closed,
}

/// Waits out `decision`'s delay on `stream`; the caller has already given back every buffer
/// it does not need after the wait.
pub(crate) async fn wait(
    state: &ProxyState,
    stream: &mut TcpStream,
    decision: Decision,
    permit: HoldPermit,
    head_only: bool,
) -> Waited {
    let held = tokio::select! {
        held = state.steps.hold_then_reshed(&decision, permit) => held,
        () = hung_up(stream) => return Waited::Closed,
    };
    match held {
        Ok(slot) => Waited::Forward(decision, slot),
        Err(resp) => {
            // Boxed: it happens once, at shutdown, and would otherwise size every held wait.
            Box::pin(answer_and_close(stream, &resp, head_only)).await;
            Waited::Closed
        }
    }
}

/// Resolves when the client has closed its side; never, once it has sent more (a pipelined
/// request or a body is waiting, and its arrival says nothing about a close).
async fn hung_up(stream: &TcpStream) {
    if let Ok(n) = stream.peek(&mut [0; 1]).await {
        if n > 0 {
            std::future::pending::<()>().await;
        }
    }
}

/// Writes `resp` with `Connection: close`, then closes. Request bytes left unread when a socket
/// closes make the kernel reset the connection, and a reset can discard the answer before the
/// client reads it: what arrives is read off for a moment first.
async fn answer_and_close(stream: &mut TcpStream, resp: &Response<bytes::Bytes>, head_only: bool) {
    let mut out = Vec::new();
    write_answer(&mut out, resp, head_only, true);
    if stream.write_all(&out).await.is_err() || stream.shutdown().await.is_err() {
        return;
    }
    let drain = async {
        let mut sink = vec![0u8; 4096];
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// Decides the request at the front of `buf`, which the own loop hands to hyper, and waits out
/// its hold here. `Some(None)`: hyper decides it as before (a head hyper will refuse with 431 or
/// 400); `Some(Some(_))`: its client and what hyper does with it; `None`: the connection is
/// done.
pub(crate) async fn decide_before_hyper(
    state: &ProxyState,
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    peer: IpAddr,
) -> Option<Option<(Client, Admission)>> {
    let Some((method, uri, headers)) = parse_head(buf) else {
        return Some(None);
    };
    if state.limits.check(&headers).is_err()
        || crate::model::request_path::refusal(uri.path()).is_some()
    {
        return Some(None);
    }
    let client = state.steps.resolve(peer, &headers);
    let view = RequestView {
        client,
        method: &method,
        path: uri.path(),
        headers: &headers,
    };
    let admission = admit(state, &view).await;
    let Admission::Hold(decision, permit) = admission else {
        return Some(Some((client, admission)));
    };
    drop((headers, uri));
    // Only the bytes read so far are kept (head and any body), in an allocation of their size.
    *buf = BytesMut::from(&buf[..]);
    match wait(state, stream, decision, permit, method == Method::HEAD).await {
        Waited::Forward(d, slot) => Some(Some((client, Admission::Forward(d, slot)))),
        Waited::Closed => None,
    }
}

/// The method, target and fields of the complete head at the front of `buf`, as hyper will
/// see them; `None` for what hyper is left to refuse.
fn parse_head(buf: &[u8]) -> Option<(Method, Uri, HeaderMap)> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut slots);
    if !matches!(req.parse(buf), Ok(httparse::Status::Complete(_))) {
        return None;
    }
    let method = Method::from_bytes(req.method?.as_bytes()).ok()?;
    let target = req.path?;
    // A request that breaks a rule is refused by hyper's path before any decision, as the own
    // loop refuses it: it is not metered here either.
    let hosts = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"));
    if request_rules::refused_method(&method).is_some()
        || request_rules::host_problem(req.version == Some(1), hosts.map(|h| h.value)).is_some()
        || target.len() > request_rules::MAX_TARGET_BYTES
    {
        return None;
    }
    let uri: Uri = target.parse().ok()?;
    let mut headers = HeaderMap::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        headers.append(
            HeaderName::from_bytes(h.name.as_bytes()).ok()?,
            HeaderValue::from_bytes(h.value).ok()?,
        );
    }
    Some((method, uri, headers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_read_as_hyper_reads_them() {
        let (m, uri, h) = parse_head(
            b"POST http://site/a/b?q=1 HTTP/1.1\r\nHost: s\r\nX-A: 1\r\nx-a: 2\r\n\r\nbody",
        )
        .unwrap();
        assert_eq!(m, Method::POST);
        assert_eq!(uri.path(), "/a/b");
        assert_eq!(h.get_all("x-a").iter().count(), 2);
        assert!(parse_head(b"POST / HTTP/1.1\r\nHost: s\r\n").is_none());
        assert!(parse_head(b"POST / HTTP/1.1\r\nbad\r\n\r\n").is_none());
    }
}
