//! The proxy's access log lines ([`crate::edge::access_log`]): started when a request's head is
//! read, given the decision once admitted, finished with the status and the body bytes sent.
//! The own loop finishes its lines itself; hyper's path wraps the response body
//! ([`Logged`]), which finishes the line when the body ends; [`crate::proxy::hyper`]
//! marks its response with the decision's [`Verdict`] ([`crate::edge::access_log::record::mark`]).

use std::net::IpAddr;

use bytes::Bytes;
use http::{Request, Response};

use crate::edge::access_log::body::Logged;
use crate::edge::access_log::handle::agent_and_host;
use crate::edge::access_log::record::Seen;
use crate::edge::access_log::{Record, Surface, Verdict};
use crate::edge::steps::Admission;
use crate::engine::decider::RequestView;
use crate::identity::client_ip::Client;
use crate::proxy::hyper::ProxyState;

/// The value of field `name` in the raw request head `head` (empty when absent).
fn head_field<'h>(head: &'h [u8], name: &[u8]) -> &'h [u8] {
    head.split(|&b| b == b'\n')
        .skip(1)
        .take_while(|line| !line.trim_ascii().is_empty())
        .find_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            line[..colon]
                .eq_ignore_ascii_case(name)
                .then(|| line[colon + 1..].trim_ascii())
        })
        .unwrap_or(b"")
}

/// Starts the own loop's line for the request from `peer` whose raw head is `head`.
pub(crate) fn start_head(
    state: &ProxyState,
    peer: IpAddr,
    view: &RequestView<'_>,
    head: &[u8],
) -> Option<Box<Record>> {
    if !state.steps.access_log.is_on() {
        return None;
    }
    state.steps.access_log.start(&Seen {
        surface: Surface::Proxy,
        peer,
        client: view.client.ip(),
        method: view.method,
        version: http::Version::HTTP_11,
        host: head_field(head, b"host"),
        path: view.path,
        user_agent: head_field(head, b"user-agent"),
    })
}

/// Logs the own loop's refusal of a head it could not serve (malformed, over the limits):
/// method and path as far as the request line tells them, no decision (none was made).
pub(crate) fn refused(state: &ProxyState, peer: IpAddr, head: &[u8], resp: &Response<Bytes>) {
    if !state.steps.access_log.is_on() {
        return;
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or(b"");
    let mut words = line.split(|&b| b == b' ');
    let method = words
        .next()
        .and_then(|m| http::Method::from_bytes(m).ok())
        .or_else(|| http::Method::from_bytes(b"-").ok())
        .unwrap_or_default();
    let target = words.next().unwrap_or(b"");
    let target = target.split(|&b| b == b'?').next().unwrap_or(b"");
    let path = std::str::from_utf8(target).unwrap_or("");
    let record = state.steps.access_log.start(&Seen {
        surface: Surface::Proxy,
        peer,
        client: peer,
        method: &method,
        version: http::Version::HTTP_11,
        host: head_field(head, b"host"),
        path: if path.starts_with('/') { path } else { "" },
        user_agent: head_field(head, b"user-agent"),
    });
    answered(state, record, resp, false);
}

/// Starts the line for a request served by hyper's server, from `peer`, sent by `client`.
pub(crate) fn start_request<B>(
    state: &ProxyState,
    (peer, client): (IpAddr, Client),
    req: &Request<B>,
) -> Option<Box<Record>> {
    if !state.steps.access_log.is_on() {
        return None;
    }
    let (user_agent, host) = agent_and_host(req.headers());
    let host = if host.is_empty() {
        // HTTP/2 carries it in `:authority`.
        req.uri()
            .authority()
            .map_or(&b""[..], |a| a.as_str().as_bytes())
    } else {
        host
    };
    state.steps.access_log.start(&Seen {
        surface: Surface::Proxy,
        peer,
        client: client.ip(),
        method: req.method(),
        version: req.version(),
        host,
        path: req.uri().path(),
        user_agent,
    })
}

/// Notes what the admission step decided (a refusal's verdict rides in its response:
/// [`crate::proxy::hyper::admit`] puts it there).
pub(crate) fn admitted(line: &mut Option<Box<Record>>, admission: &Admission) {
    if let Some(line) = line {
        line.verdict = match admission {
            Admission::Forward(d, _) | Admission::Hold(d, _) => Some(Verdict::of(d)),
            Admission::Answer(resp) => resp.extensions().get::<Verdict>().cloned(),
        };
    }
}

/// Finishes `line` with an answer the daemon wrote itself.
pub(crate) fn answered(
    state: &ProxyState,
    line: Option<Box<Record>>,
    resp: &Response<Bytes>,
    head_only: bool,
) {
    let bytes = if head_only {
        0
    } else {
        resp.body().len() as u64
    };
    state
        .steps
        .access_log
        .finish(line, resp.status().as_u16(), bytes);
}

/// hyper's response with a body that finishes `line` when it ends.
pub(crate) fn logged<B>(
    state: &ProxyState,
    mut line: Option<Box<Record>>,
    resp: Response<B>,
) -> Response<Logged<B>> {
    if let Some(l) = &mut line {
        l.verdict = resp.extensions().get::<Verdict>().cloned();
    }
    let status = resp.status().as_u16();
    resp.map(|b| Logged::new(b, &state.steps.access_log, line, status))
}

#[cfg(test)]
mod tests {
    use super::head_field;

    #[test]
    fn fields_are_found_in_a_raw_head_in_any_case() {
        let head = b"GET / HTTP/1.1\r\nHost: a.example\r\nuser-AGENT:  curl/8 \r\n\r\n";
        assert_eq!(head_field(head, b"host"), b"a.example");
        assert_eq!(head_field(head, b"user-agent"), b"curl/8");
        assert_eq!(head_field(head, b"referer"), b"");
        // The head ends at its blank line: a pipelined request's fields are not this one's.
        let two = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nUser-Agent: b\r\n\r\n";
        assert_eq!(head_field(two, b"user-agent"), b"");
    }
}
