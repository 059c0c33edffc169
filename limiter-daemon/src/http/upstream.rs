//! The client to the upstream: a pool of keep-alive HTTP/1.1 connections, one pool per proxy
//! thread (so checkout is an uncontended lock and a `Vec::pop`), a connect timeout (→ 502) and a
//! response-head timeout (→ 504). Bodies stream both ways: the client's request body is handed
//! to the upstream connection as it arrives, and the upstream's body is returned unread, wrapped
//! in [`UpstreamBody`], which gives the connection back to the pool once the body has been read
//! to its end (a body dropped half-read closes its connection instead).
//!
//! Built on hyper's connection-level client rather than hyper-util's pooled `Client`: that one
//! spawns a task per request to watch the connection go idle and hashes a pool key per checkout;
//! this pool does neither (measured in `docs/http.md`).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::HOST;
use http::uri::{Authority, PathAndQuery};
use http::{HeaderValue, Request, Response, Uri};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;

use crate::config::http::HttpSettings;

/// Why forwarding failed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream {authority} is unreachable")]
    Unreachable {
        authority: Authority,
        #[source]
        source: std::io::Error,
    },
    #[error("upstream {authority} failed the exchange")]
    Failed {
        authority: Authority,
        #[source]
        source: hyper::Error,
    },
    #[error("upstream {authority} sent no response within {timeout:?}")]
    Timeout {
        authority: Authority,
        timeout: Duration,
    },
}

/// Failures since start, by kind (for metrics).
#[derive(Debug, Default)]
pub struct UpstreamCounters {
    pub unreachable: AtomicU64,
    pub failed: AtomicU64,
    pub timeouts: AtomicU64,
    /// New TCP connections opened to the upstream.
    pub connects: AtomicU64,
}

struct Idle {
    sender: SendRequest<Incoming>,
    since: Instant,
}

pub struct Upstream {
    authority: Authority,
    /// `host:port` for resolution (port 80 when the authority has none).
    target: String,
    host_header: Option<HeaderValue>,
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
    idle_timeout: Duration,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// Shared by every proxy thread's client.
    pub counters: Arc<UpstreamCounters>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("authority", &self.authority)
            .field("idle", &self.idle.lock().len())
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
            idle: Mutex::new(Vec::new()),
            max_idle: settings.pool_max_idle,
            idle_timeout: settings.pool_idle_timeout,
            connect_timeout: settings.connect_timeout,
            response_timeout: settings.response_timeout,
            counters,
        })
    }

    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// Idle connections in this pool right now.
    pub fn idle_connections(&self) -> usize {
        self.idle.lock().len()
    }

    fn unreachable(&self, source: std::io::Error) -> UpstreamError {
        self.counters.unreachable.fetch_add(1, Ordering::Relaxed);
        UpstreamError::Unreachable {
            authority: self.authority.clone(),
            source,
        }
    }

    /// A fresh connection: resolve, connect within the timeout, HTTP/1.1 handshake.
    async fn connect(&self) -> Result<SendRequest<Incoming>, UpstreamError> {
        let attempt = async {
            let mut last = None;
            for addr in tokio::net::lookup_host(self.target.as_str()).await? {
                match tokio::net::TcpStream::connect(addr).await {
                    Ok(s) => return Ok((s, addr)),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, "name resolved to no address")
            }))
        };
        let (stream, addr): (tokio::net::TcpStream, SocketAddr) =
            match tokio::time::timeout(self.connect_timeout, attempt).await {
                Ok(Ok(pair)) => pair,
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
        let (sender, conn) = hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|source| {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                UpstreamError::Failed {
                    authority: self.authority.clone(),
                    source,
                }
            })?;
        self.counters.connects.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            if let Err(err) = conn.await {
                tracing::debug!(%addr, error = %err, "upstream connection ended with an error");
            }
        });
        Ok(sender)
    }

    /// An idle connection ready for a request, or a new one.
    async fn checkout(&self) -> Result<SendRequest<Incoming>, UpstreamError> {
        loop {
            let idle = self.idle.lock().pop();
            match idle {
                Some(i) if i.sender.is_ready() && i.since.elapsed() < self.idle_timeout => {
                    return Ok(i.sender)
                }
                // Closed by the upstream, or idle too long: dropping it closes it.
                Some(_) => continue,
                // Boxed, here and below: connecting is rare, and its future is large; inline, it
                // would be copied with every request's future.
                None => return Box::pin(self.connect()).await,
            }
        }
    }

    /// Gives a connection back once its exchange is complete.
    fn put_back(self: &Arc<Self>, mut sender: SendRequest<Incoming>) {
        if sender.is_ready() {
            let mut idle = self.idle.lock();
            if idle.len() < self.max_idle {
                idle.push(Idle {
                    sender,
                    since: Instant::now(),
                });
            }
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

    /// Sends `req` (its URI is reduced to the path and query; a missing `Host` gets the
    /// upstream's; other headers are sent as given) and returns the response head with its body
    /// unread.
    pub async fn send(
        self: &Arc<Self>,
        mut req: Request<Incoming>,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
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
            let failed = |err: hyper::client::conn::TrySendError<Request<Incoming>>| {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                UpstreamError::Failed {
                    authority: self.authority.clone(),
                    source: err.into_error(),
                }
            };
            let mut sender = self.checkout().await?;
            match sender.try_send_request(req).await {
                Ok(resp) => Ok((resp, sender)),
                Err(mut err) => {
                    // A pooled connection may have been closed by the upstream just now: hyper
                    // hands the unsent request back, and it goes out once more on a new
                    // connection. A request already (partly) sent is never repeated.
                    let Some(unsent) = err.take_message() else {
                        return Err(failed(err));
                    };
                    let mut sender = Box::pin(self.connect()).await?;
                    match sender.try_send_request(unsent).await {
                        Ok(resp) => Ok((resp, sender)),
                        Err(err) => Err(failed(err)),
                    }
                }
            }
        };
        match tokio::time::timeout(self.response_timeout, exchange).await {
            Ok(Ok((resp, sender))) => {
                let (parts, inner) = resp.into_parts();
                let mut body = UpstreamBody {
                    inner,
                    lease: Some((sender, Arc::clone(self))),
                };
                if body.inner.is_end_stream() {
                    body.release();
                }
                Ok(Response::from_parts(parts, body))
            }
            Ok(Err(err)) => Err(err),
            Err(_) => {
                self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                Err(UpstreamError::Timeout {
                    authority: self.authority.clone(),
                    timeout: self.response_timeout,
                })
            }
        }
    }
}

/// The upstream's response body, streamed through; returns its connection to the pool when
/// read to the end.
pub struct UpstreamBody {
    inner: Incoming,
    lease: Option<(SendRequest<Incoming>, Arc<Upstream>)>,
}

impl UpstreamBody {
    fn release(&mut self) {
        if let Some((sender, pool)) = self.lease.take() {
            pool.put_back(sender);
        }
    }
}

impl Body for UpstreamBody {
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

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        // Dropped after its last frame (hyper may not poll past a known length): reusable.
        // Dropped half-read: the connection closes with the lease.
        if self.inner.is_end_stream() {
            self.release();
        }
    }
}
