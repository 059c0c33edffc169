//! The client to the upstream: keep-alive HTTP/1.1 connections, pooled per proxy thread (so
//! checkout is an uncontended lock and a `Vec::pop`), a connect timeout (→ 502) and a
//! response-head timeout (→ 504). Bodies stream both ways: the upstream's body is returned
//! unread, wrapped in [`UpstreamBody`], which gives the connection back to the pool once the
//! body has been read to its end (a body dropped half-read closes its connection instead).
//!
//! Two paths share the pool's settings and counters:
//! - bodyless GET, HEAD and OPTIONS, nearly all of a crawler's traffic, take the direct path of
//!   [`crate::proxy::upstream::direct`]: written and read by the request's own task;
//! - requests with a body go through hyper's connection-level client, which streams the body
//!   to the upstream while it reads the answer. (hyper-util's pooled `Client` was not used: it
//!   spawns a task per request to watch the connection go idle and hashes a pool key per
//!   checkout; measured in `docs/http.md`.)

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::config::http::HttpSettings;
use crate::proxy::request_body::RequestBody;
use crate::proxy::upstream::conn::{Conn, DirectConn};
use crate::proxy::upstream::error::{UpstreamCounters, UpstreamError};
use crate::proxy::upstream::pool::{Grant, Kind, Pool, Slot};
use bytes::Bytes;
use http::header::HOST;
use http::uri::{Authority, PathAndQuery};
use http::{HeaderValue, Request, Response, Uri};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

pub struct Upstream {
    authority: Authority,
    /// `host:port` for resolution (port 80 when the authority has none).
    target: String,
    host_header: Option<HeaderValue>,
    /// Both paths' connections: the cap, the idle ones, the requests waiting.
    pool: Arc<Pool<Conn>>,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// Shared by every proxy thread's client.
    pub counters: Arc<UpstreamCounters>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("authority", &self.authority)
            .field("idle", &self.pool.idle())
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// A client with its own connection pool, counting into `counters`. Use it on one runtime:
    /// its connections are driven by tasks spawned there.
    pub fn new(
        authority: Authority,
        settings: &HttpSettings,
        counters: Arc<UpstreamCounters>,
    ) -> Arc<Self> {
        let target = match authority.port_u16() {
            Some(_) => authority.as_str().to_string(),
            None => format!("{}:80", authority.host()),
        };
        Arc::new(Upstream {
            host_header: HeaderValue::from_str(authority.as_str()).ok(),
            target,
            authority,
            pool: Pool::new(
                settings.upstream_max_connections.get(),
                settings.pool_max_idle,
                settings.pool_idle_timeout,
                Arc::clone(&counters),
            ),
            connect_timeout: settings.connect_timeout,
            response_timeout: settings.response_timeout,
            counters,
        })
    }

    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// Idle connections in this pool right now (both paths).
    pub fn idle_connections(&self) -> usize {
        self.pool.idle()
    }

    /// This pool's connections open now, and requests waiting for one.
    pub fn load(&self) -> (usize, usize) {
        self.pool.load()
    }

    pub(crate) fn host_header(&self) -> Option<&HeaderValue> {
        self.host_header.as_ref()
    }

    pub(crate) fn failed(&self, source: Box<dyn std::error::Error + Send + Sync>) -> UpstreamError {
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
        UpstreamError::Failed {
            authority: self.authority.clone(),
            source,
        }
    }

    /// `exchange` bounded by the response-head timeout (→ [`UpstreamError::Timeout`]).
    pub(crate) async fn within_response_timeout<T>(
        &self,
        exchange: impl std::future::Future<Output = Result<T, UpstreamError>>,
    ) -> Result<T, UpstreamError> {
        match tokio::time::timeout(self.response_timeout, exchange).await {
            Ok(result) => result,
            Err(_) => {
                self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                Err(UpstreamError::Timeout {
                    authority: self.authority.clone(),
                    timeout: self.response_timeout,
                })
            }
        }
    }

    /// A direct-path connection: an idle one (when `reuse`; then `true`) or a new one, waiting
    /// in line when the connection cap is reached.
    pub(crate) async fn checkout_direct(
        &self,
        reuse: bool,
    ) -> Result<(DirectConn, bool), UpstreamError> {
        match self.grant(Kind::Direct, reuse).await? {
            Grant::Conn(Conn::Direct(conn)) => Ok((conn, true)),
            Grant::Conn(Conn::Hyper(_)) => unreachable!("the pool grants the kind asked for"),
            // Boxed: connecting is rare, and its future is large.
            Grant::Slot(slot) => Ok((Box::pin(self.connect_direct(slot)).await?, false)),
        }
    }

    pub(crate) fn put_back_direct(&self, conn: DirectConn) {
        self.pool.put_back(Conn::Direct(conn));
    }

    async fn grant(&self, kind: Kind, reuse: bool) -> Result<Grant<Conn>, UpstreamError> {
        self.pool
            .checkout(kind, reuse)
            .await
            .map_err(|e| self.failed(Box::new(e)))
    }

    fn unreachable(&self, source: std::io::Error) -> UpstreamError {
        self.counters.unreachable.fetch_add(1, Ordering::Relaxed);
        UpstreamError::Unreachable {
            authority: self.authority.clone(),
            source,
        }
    }

    /// A fresh TCP connection: resolve, connect within the timeout, `TCP_NODELAY`.
    pub(crate) async fn connect_stream(&self) -> Result<tokio::net::TcpStream, UpstreamError> {
        let attempt = async {
            let mut last = None;
            for addr in tokio::net::lookup_host(self.target.as_str()).await? {
                match tokio::net::TcpStream::connect(addr).await {
                    Ok(s) => return Ok(s),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, "name resolved to no address")
            }))
        };
        let stream = match tokio::time::timeout(self.connect_timeout, attempt).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(self.unreachable(e)),
            Err(_) => {
                return Err(self.unreachable(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("connect timed out after {:?}", self.connect_timeout),
                )))
            }
        };
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY upstream");
        }
        self.counters.connects.fetch_add(1, Ordering::Relaxed);
        Ok(stream)
    }

    /// A fresh connection for hyper's client: TCP, then the HTTP/1.1 handshake. Its task holds
    /// `slot` until the connection ends.
    async fn connect(&self, slot: Slot) -> Result<SendRequest<RequestBody>, UpstreamError> {
        let stream = self.connect_stream().await?;
        let addr = stream.peer_addr().ok();
        let (sender, conn) = hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|source| self.failed(Box::new(source)))?;
        tokio::spawn(async move {
            if let Err(err) = conn.await {
                tracing::debug!(?addr, error = %err, "upstream connection ended with an error");
            }
            drop(slot);
        });
        Ok(sender)
    }

    /// A connection ready for a request: an idle one (when `reuse`) or a new one, waiting in
    /// line when the connection cap is reached.
    async fn checkout(&self, reuse: bool) -> Result<SendRequest<RequestBody>, UpstreamError> {
        match self.grant(Kind::Hyper, reuse).await? {
            Grant::Conn(Conn::Hyper(sender)) => Ok(sender),
            Grant::Conn(Conn::Direct(_)) => unreachable!("the pool grants the kind asked for"),
            // Boxed: connecting is rare, and its future is large; inline, it would be copied
            // with every request's future.
            Grant::Slot(slot) => Box::pin(self.connect(slot)).await,
        }
    }

    /// Gives a connection back once its exchange is complete.
    fn put_back(self: &Arc<Self>, mut sender: SendRequest<RequestBody>) {
        if sender.is_ready() {
            self.pool.put_back(Conn::Hyper(sender));
        } else if !sender.is_closed() {
            // The connection task has not yet noticed the end of the exchange: wait for it
            // off the request path.
            let pool = Arc::clone(self);
            tokio::spawn(async move {
                if sender.ready().await.is_ok() {
                    pool.put_back(sender);
                }
            });
        }
    }

    /// The path for requests with a body: hyper's client.
    pub(crate) async fn send_with_body(
        self: &Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<Response<HyperBody>, UpstreamError> {
        let (parts, body) = req.into_parts();
        let (body, watch) = RequestBody::new(body);
        let mut req = Request::from_parts(parts, body);
        let pq = req
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        *req.uri_mut() = Uri::from(pq);
        if !req.headers().contains_key(HOST) {
            if let Some(h) = &self.host_header {
                req.headers_mut().insert(HOST, h.clone());
            }
        }
        let exchange = async {
            let failed = |err: hyper::client::conn::TrySendError<Request<RequestBody>>| {
                let source = Box::new(err.into_error());
                if watch.client_body_broke() {
                    self.counters
                        .client_body_errors
                        .fetch_add(1, Ordering::Relaxed);
                    return UpstreamError::ClientBody { source };
                }
                self.failed(source)
            };
            let mut sender = self.checkout(true).await?;
            match sender.try_send_request(req).await {
                Ok(resp) => Ok((resp, sender)),
                Err(mut err) => {
                    // A pooled connection may have been closed by the upstream just now: hyper
                    // hands the unsent request back, and it goes out once more on a new
                    // connection. A request already (partly) sent is never repeated.
                    let Some(unsent) = err.take_message() else {
                        return Err(failed(err));
                    };
                    // Its slot is freed once its connection task ends.
                    drop(sender);
                    let mut sender = self.checkout(false).await?;
                    match sender.try_send_request(unsent).await {
                        Ok(resp) => Ok((resp, sender)),
                        Err(err) => Err(failed(err)),
                    }
                }
            }
        };
        let (resp, sender) = self.within_response_timeout(exchange).await?;
        let (parts, inner) = resp.into_parts();
        let mut body = HyperBody {
            inner,
            lease: Some((sender, Arc::clone(self))),
        };
        if body.inner.is_end_stream() {
            body.release();
        }
        Ok(Response::from_parts(parts, body))
    }
}

/// A body read by hyper's client; returns its connection to the pool when read to the end.
pub struct HyperBody {
    inner: Incoming,
    lease: Option<(SendRequest<RequestBody>, Arc<Upstream>)>,
}

impl HyperBody {
    fn release(&mut self) {
        if let Some((sender, pool)) = self.lease.take() {
            pool.put_back(sender);
        }
    }
}

impl Body for HyperBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => this.release(),
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => this.release(),
            // A broken body: the connection is not reusable.
            Poll::Ready(Some(Err(_))) => this.lease = None,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for HyperBody {
    fn drop(&mut self) {
        // Dropped after its last frame (hyper may not poll past a known length): reusable.
        // Dropped half-read: the connection closes with the lease.
        if self.inner.is_end_stream() {
            self.release();
        }
    }
}
