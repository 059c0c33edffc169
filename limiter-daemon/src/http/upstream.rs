//! The pooled client to the upstream: keep-alive connections reused across requests, a connect
//! timeout (→ 502) and a response-head timeout (→ 504). Bodies stream both ways: the client's
//! request body is handed to the upstream connection as it arrives, and the upstream's body is
//! returned unread.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::http::HttpSettings;

/// Why forwarding failed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream {authority} is unreachable")]
    Unreachable {
        authority: Authority,
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    #[error("upstream {authority} failed the exchange")]
    Failed {
        authority: Authority,
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    #[error("upstream {authority} sent no response within {timeout:?}")]
    Timeout {
        authority: Authority,
        timeout: Duration,
    },
    #[error("cannot build the upstream URI")]
    Uri(#[from] http::Error),
}

/// Failures since start, by kind (for metrics).
#[derive(Debug, Default)]
pub struct UpstreamCounters {
    pub unreachable: AtomicU64,
    pub failed: AtomicU64,
    pub timeouts: AtomicU64,
}

#[derive(Debug)]
pub struct Upstream {
    client: Client<HttpConnector, Incoming>,
    authority: Authority,
    response_timeout: Duration,
    pub counters: UpstreamCounters,
}

impl Upstream {
    pub fn new(authority: Authority, settings: &HttpSettings) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(settings.connect_timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(settings.pool_idle_timeout)
            .pool_max_idle_per_host(settings.pool_max_idle)
            .build(connector);
        Upstream {
            client,
            authority,
            response_timeout: settings.response_timeout,
            counters: UpstreamCounters::default(),
        }
    }

    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// Sends `req` (its URI is replaced by the upstream origin + the request's path and query;
    /// its headers are sent as given) and returns the response head with its body unread.
    pub async fn send(
        &self,
        mut req: Request<Incoming>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let pq = req
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        *req.uri_mut() = Uri::builder()
            .scheme(Scheme::HTTP)
            .authority(self.authority.clone())
            .path_and_query(pq)
            .build()?;
        match tokio::time::timeout(self.response_timeout, self.client.request(req)).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(source)) if source.is_connect() => {
                self.counters.unreachable.fetch_add(1, Ordering::Relaxed);
                Err(UpstreamError::Unreachable {
                    authority: self.authority.clone(),
                    source,
                })
            }
            Ok(Err(source)) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                Err(UpstreamError::Failed {
                    authority: self.authority.clone(),
                    source,
                })
            }
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
