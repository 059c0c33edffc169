//! A careful HTTPS GET for documents the daemon fetches on its own behalf (agents' key
//! directories; published range lists and the ASN table): HTTPS only, status 200 only (a
//! redirect is a failure, never followed), a timeout on the whole exchange, a bound on the
//! body, and no private, loopback or link-local target unless the operator allows it (tests
//! serve from loopback). [`get_if_changed`] sends the validators of the copy the caller holds
//! (`If-None-Match`, `If-Modified-Since`) and takes a 304 as "unchanged".

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use ipnet::IpNet;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

/// How a fetcher behaves.
#[derive(Clone)]
pub struct FetchOptions {
    pub timeout: Duration,
    pub max_body: usize,
    /// Targets allowed even though private, loopback or link-local.
    pub allow: Vec<IpNet>,
    pub accept: &'static str,
    tls: Arc<rustls::ClientConfig>,
}

/// What came back.
#[derive(Clone, Debug)]
pub struct Response {
    pub body: Vec<u8>,
    pub cache_control: Option<String>,
    /// The validators of this copy, to send on the next fetch.
    pub validators: Validators,
}

/// `ETag` and `Last-Modified` of a copy held, sent as `If-None-Match` and
/// `If-Modified-Since`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Validators {
    pub etag: Option<String>,
    pub last_modified: Option<String>,
}

/// What a conditional GET found.
#[derive(Clone, Debug)]
pub enum Conditional {
    /// 304: the copy held is current.
    NotModified,
    Fresh(Response),
}

/// Whether `ip` is a target no fetch goes to by default.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64/10, carrier-grade NAT
                || o[0] == 0
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal(IpAddr::V4(v4));
            }
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link local
        }
    }
}

impl FetchOptions {
    /// Trusting the system's roots, plus the PEM certificates in `extra_ca` (tests' CA).
    pub fn new(
        timeout: Duration,
        max_body: usize,
        allow: Vec<IpNet>,
        accept: &'static str,
        extra_ca: Option<&Path>,
    ) -> Result<Self, String> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        if let Some(path) = extra_ca {
            for cert in CertificateDer::pem_file_iter(path).map_err(|e| e.to_string())? {
                roots
                    .add(cert.map_err(|e| e.to_string())?)
                    .map_err(|e| e.to_string())?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(FetchOptions {
            timeout,
            max_body,
            allow,
            accept,
            tls: Arc::new(tls),
        })
    }

    fn allowed(&self, ip: IpAddr) -> bool {
        !is_internal(ip) || self.allow.iter().any(|n| n.contains(&ip))
    }
}

/// GETs `url` under `opts`; any failure is a message for the log and the source's status.
pub async fn get(url: &str, opts: &FetchOptions) -> Result<Response, String> {
    match get_if_changed(url, opts, &Validators::default()).await? {
        Conditional::Fresh(r) => Ok(r),
        // Unasked for: nothing was held to be current.
        Conditional::NotModified => Err("status 304".into()),
    }
}

/// GETs `url` unless the copy `held` describes is current (a 304).
pub async fn get_if_changed(
    url: &str,
    opts: &FetchOptions,
    held: &Validators,
) -> Result<Conditional, String> {
    tokio::time::timeout(opts.timeout, get_inner(url, opts, held))
        .await
        .map_err(|_| format!("timed out after {:?}", opts.timeout))?
}

async fn get_inner(
    url: &str,
    opts: &FetchOptions,
    held: &Validators,
) -> Result<Conditional, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("bad URL: {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err("not https".into());
    }
    let authority = uri.authority().ok_or("no host")?.clone();
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = authority.port_u16().unwrap_or(443);
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("resolving {host}: {e}"))?
        .collect();
    // Every address the name resolves to must be allowed: one internal answer refuses the
    // name (a rebinding name cannot pick its moment).
    if addrs.is_empty() || addrs.iter().any(|a| !opts.allowed(a.ip())) {
        return Err(format!("{host} resolves to an address not allowed"));
    }
    let tcp = TcpStream::connect(addrs[0])
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::clone(&opts.tls))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP: {e}"))?;
    let driver = tokio::spawn(conn);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut req = http::Request::get(path)
        .header(http::header::HOST, authority.as_str())
        .header(http::header::ACCEPT, opts.accept)
        .header(http::header::USER_AGENT, "limiter");
    if let Some(etag) = &held.etag {
        req = req.header(http::header::IF_NONE_MATCH, etag);
    }
    if let Some(lm) = &held.last_modified {
        req = req.header(http::header::IF_MODIFIED_SINCE, lm);
    }
    let req = req.body(Empty::<Bytes>::new()).map_err(|e| e.to_string())?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    let conditional = held.etag.is_some() || held.last_modified.is_some();
    let result = read(resp, opts.max_body, conditional).await;
    driver.abort();
    result
}

async fn read(
    resp: http::Response<hyper::body::Incoming>,
    max: usize,
    conditional: bool,
) -> Result<Conditional, String> {
    if conditional && resp.status() == http::StatusCode::NOT_MODIFIED {
        return Ok(Conditional::NotModified);
    }
    if resp.status() != http::StatusCode::OK {
        // Redirects included: a directory is served where it is named, or not at all.
        return Err(format!("status {}", resp.status().as_u16()));
    }
    let header = |name: http::header::HeaderName| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let cache_control = header(http::header::CACHE_CONTROL);
    let validators = Validators {
        etag: header(http::header::ETAG),
        last_modified: header(http::header::LAST_MODIFIED),
    };
    if resp
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .is_some_and(|n| n > max)
    {
        return Err(format!("body over {max} bytes"));
    }
    let body = Limited::new(resp.into_body(), max)
        .collect()
        .await
        .map_err(|_| format!("body over {max} bytes or broken"))?
        .to_bytes()
        .to_vec();
    Ok(Conditional::Fresh(Response {
        body,
        cache_control,
        validators,
    }))
}
