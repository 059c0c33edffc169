//! The certificates in force on the TLS listeners and the SNI resolver that picks one per
//! handshake; swapped whole on a reload.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use crate::config::tls::TlsCert;

/// The certificates in force, and handshake counters for metrics.
pub struct TlsCerts {
    certs: RwLock<Vec<TlsCert>>,
    pub handshakes: AtomicU64,
    pub handshake_failures: AtomicU64,
}

impl fmt::Debug for TlsCerts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsCerts")
            .field("certs", &self.certs.read().len())
            .finish_non_exhaustive()
    }
}

impl TlsCerts {
    pub fn new(certs: Vec<TlsCert>) -> Arc<Self> {
        Arc::new(TlsCerts {
            certs: RwLock::new(certs),
            handshakes: AtomicU64::new(0),
            handshake_failures: AtomicU64::new(0),
        })
    }

    /// The certificates of a reload.
    pub fn replace(&self, certs: Vec<TlsCert>) {
        if !certs.is_empty() {
            *self.certs.write() = certs;
        }
    }

    /// The server side config: this set as the resolver, ALPN `h2` (when `h2`) and `http/1.1`.
    pub fn server_config(self: &Arc<Self>, h2: bool) -> Arc<ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .expect("ring supports TLS 1.2 and 1.3")
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver(Arc::clone(self))));
        cfg.alpn_protocols = if h2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        Arc::new(cfg)
    }

    pub fn counted(&self, ok: bool) {
        let c = if ok {
            &self.handshakes
        } else {
            &self.handshake_failures
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct Resolver(Arc<TlsCerts>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let certs = self.0.certs.read();
        let by_name = hello.server_name().and_then(|name| {
            let name = rustls::pki_types::ServerName::try_from(name).ok()?;
            certs.iter().find(|c| {
                c.key.cert.first().is_some_and(|der| {
                    webpki::EndEntityCert::try_from(der)
                        .is_ok_and(|ee| ee.verify_is_valid_for_subject_name(&name).is_ok())
                })
            })
        });
        by_name
            .or_else(|| certs.first())
            .map(|c| Arc::clone(&c.key))
    }
}
