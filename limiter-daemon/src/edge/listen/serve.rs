//! The accept loop and connection life shared by the API, admin and metrics listeners.
//!
//! - HTTP/1.1 only (what every client of these listeners speaks: nginx `auth_request`,
//!   limiterctl, Prometheus, curl), so hyper's head-read timer applies to every connection.
//! - The head must arrive within `header_read_timeout`, counted from the connection's start
//!   and again from the end of each response: an idle keep-alive connection is closed then.
//! - A body must arrive within `body_read_timeout` of its head: past it the request is answered
//!   `408` and the connection closed (what had been buffered is dropped with it).
//! - At most `max_connections` at once: one more is answered `503` and closed at once, so a
//!   flood is refused in the open rather than left waiting in the kernel's backlog.
//! - On stop: no more accepts, idle connections close, busy ones finish their request within
//!   `shutdown_grace`, then are dropped.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use bytes::Bytes;
use http::header::CONNECTION;
use http::{HeaderValue, Request, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;

use crate::edge::listen::accept::{accept_until, Cap};
use crate::edge::listen::body::DeadlineBody;
use crate::edge::listen::limits::ListenLimits;
use crate::edge::listen::rewind::Rewind;
use crate::edge::render::problem::Problem;

/// Written to a connection past the cap before it is closed (a problem document, like every
/// error the daemon writes).
const FULL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\n\
cache-control: no-store\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 119\r\n\r\n\
{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,\"detail\":\"too many connections open on this listener\"}";

/// A loop of the listener's own that serves the requests it can on a connection before hyper
/// (with `app`) is given the rest ([`crate::surfaces::api::own_loop`]).
pub trait OwnLoop: Send + Sync + 'static {
    /// Serves `stream`'s requests; `Some(read)`: hand the connection, `read` first, to hyper;
    /// `None`: it is done.
    fn serve<'a>(
        &'a self,
        stream: &'a mut TcpStream,
        peer: SocketAddr,
        life: &'a Life,
    ) -> Pin<Box<dyn Future<Output = Option<Bytes>> + Send + 'a>>;
}

/// A connection's bounds and stop signals, as an [`OwnLoop`] must keep them.
pub struct Life {
    pub header_read_timeout: Duration,
    /// Cancelled at stop: finish the request in progress, then close.
    pub closing: CancellationToken,
    /// Cancelled when the shutdown grace is over: drop the connection now.
    pub dropping: CancellationToken,
}

/// Serves `app` on `listener` within `limits` until `stop` resolves, then drains (see the
/// module docs); `own`, when given, serves what it can first. `role` names the listener in
/// logs (e.g. `"admin.listen"`).
pub async fn serve(
    listener: TcpListener,
    (app, own): (Router, Option<Arc<dyn OwnLoop>>),
    limits: ListenLimits,
    role: &'static str,
    stop: impl Future<Output = ()>,
) {
    let mut cap = Cap::new(limits.max_connections, role);
    let mut hyper = hyper::server::conn::http1::Builder::new();
    hyper
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let closing = CancellationToken::new();
    let dropping = CancellationToken::new();
    let connections = TaskTracker::new();
    accept_until(&listener, role, stop, |stream, peer| {
        let Some(slot) = cap.take(peer, "refused (503)") else {
            // Best effort: the socket's buffer is empty, so this does not block.
            let _ = stream.try_write(FULL);
            return;
        };
        connections.spawn(connection(Conn {
            hyper: hyper.clone(),
            stream,
            peer,
            app: app.clone(),
            own: own.clone(),
            body_read_timeout: limits.body_read_timeout,
            life: Life {
                header_read_timeout: limits.header_read_timeout,
                closing: closing.clone(),
                dropping: dropping.clone(),
            },
            _slot: slot,
        }));
    })
    .await;
    drop(listener);
    closing.cancel();
    connections.close();
    if tokio::time::timeout(limits.shutdown_grace, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            listener = role,
            "requests still running after the shutdown grace; dropping them"
        );
        dropping.cancel();
        connections.wait().await;
    }
}

/// One accepted connection and what it needs.
struct Conn {
    hyper: hyper::server::conn::http1::Builder,
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    own: Option<Arc<dyn OwnLoop>>,
    body_read_timeout: Duration,
    life: Life,
    /// Held for the connection's life: its place under the cap.
    _slot: OwnedSemaphorePermit,
}

async fn connection(c: Conn) {
    let Conn {
        hyper,
        mut stream,
        peer,
        app,
        own,
        body_read_timeout,
        life,
        _slot,
    } = c;
    let read = match &own {
        Some(own) => match own.serve(&mut stream, peer, &life).await {
            Some(read) => read,
            None => return,
        },
        None => Bytes::new(),
    };
    let Life {
        closing, dropping, ..
    } = life;
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let app = app.clone();
        async move {
            let fired = Arc::new(AtomicBool::new(false));
            let deadline = tokio::time::Instant::now() + body_read_timeout;
            let (mut parts, body) = req.into_parts();
            // What `into_make_service_with_connect_info` gave handlers.
            parts.extensions.insert(ConnectInfo(peer));
            let body = DeadlineBody::new(body, deadline, Arc::clone(&fired));
            let resp = match app.oneshot(Request::from_parts(parts, body)).await {
                Ok(resp) => resp,
                Err(never) => match never {},
            };
            if fired.load(Ordering::Relaxed) {
                // Whatever the handler made of the failed read, the client was too slow.
                tracing::debug!(%peer, "request body not received within the body read timeout");
                return Ok::<_, Infallible>(body_timed_out(body_read_timeout));
            }
            Ok(resp)
        }
    });
    let mut conn = pin!(hyper.serve_connection(TokioIo::new(Rewind::new(read, stream)), svc));
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
        () = closing.cancelled() => {
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                ended = conn.as_mut() => ended,
                () = dropping.cancelled() => return,
            }
        }
    };
    if let Err(err) = ended {
        // Head-read timeouts land here; they are the client's doing, not the daemon's.
        tracing::debug!(%peer, error = %err, "connection ended with an error");
    }
}

/// `408` with `Connection: close`: the rest of the body is not worth waiting for.
fn body_timed_out(timeout: Duration) -> axum::response::Response {
    let mut resp = Problem::new(
        StatusCode::REQUEST_TIMEOUT,
        None,
        format!(
            "the request body did not arrive within {:?} of its head (http.body_read_timeout)",
            timeout
        ),
    )
    .into_response()
    .map(axum::body::Body::from);
    resp.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_past_the_cap_is_a_well_formed_problem_document() {
        let (head, body) = std::str::from_utf8(FULL)
            .unwrap()
            .split_once("\r\n\r\n")
            .unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(len, body.len());
        let doc: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(doc["status"], 503);
    }
}
