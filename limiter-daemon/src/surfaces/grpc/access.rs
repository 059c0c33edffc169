//! The gRPC services' access log lines ([`crate::edge::access_log`]): the request Envoy asked
//! about (its client resolved as the proxy resolves one, its method and path), the TCP peer
//! that asked (Envoy), and the HTTP status the answer tells Envoy to give (200 for an allow,
//! the daemon's 429 or 503 for a refusal).

use std::net::SocketAddr;

use crate::edge::access_log::handle::{agent_and_host, UNKNOWN};
use crate::edge::access_log::record::Seen;
use crate::edge::access_log::{Record, Surface};
use crate::edge::steps::Settled;
use crate::engine::decider::RequestView;
use crate::surfaces::api::state::ApiState;

/// Starts the line for the request `view` describes, asked by `remote`.
pub fn start(
    state: &ApiState,
    remote: Option<SocketAddr>,
    view: &RequestView<'_>,
) -> Option<Box<Record>> {
    if !state.steps.access_log.is_on() {
        return None;
    }
    let (user_agent, host) = agent_and_host(view.headers);
    state.steps.access_log.start(&Seen {
        surface: Surface::Grpc,
        peer: remote.map_or(UNKNOWN, |r| r.ip()),
        client: view.client.ip(),
        method: view.method,
        version: http::Version::HTTP_2,
        host,
        path: view.path,
        user_agent,
    })
}

/// Finishes `line` with what `settled` tells Envoy.
pub fn finish(state: &ApiState, mut line: Option<Box<Record>>, settled: &Settled) {
    let (status, bytes) = match settled {
        Settled::Allowed(d) => {
            if let Some(l) = &mut line {
                l.decided(d);
            }
            (200, 0)
        }
        Settled::Refused { decision, response } => {
            if let Some(l) = &mut line {
                l.decided(decision);
            }
            (response.status().as_u16(), response.body().len() as u64)
        }
    };
    state.steps.access_log.finish(line, status, bytes);
}
