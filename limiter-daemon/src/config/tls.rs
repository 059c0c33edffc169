//! `[[http.tls]]`: the certificates the proxy's TLS listeners (`[http] tls_listen`) present,
//! each a PEM chain and its key. Every file is read and checked when the config is (at start
//! and at each reload): a missing or unparsable file, or a key that does not match its
//! certificate, or a certificate outside its validity dates (expired, or not valid yet), is
//! refused naming the entry's field, and a reload refused keeps the old ones. Only the dates
//! of the leaf are checked (the chain is the client's to judge).

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use serde::Deserialize;
use x509_parser::time::ASN1Time;

use crate::config::error::ConfigError;

/// One `[[http.tls]]` entry as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    /// PEM: the certificate, then its chain (e.g. certbot's `fullchain.pem`).
    pub cert_file: PathBuf,
    /// PEM: its private key (PKCS#8, PKCS#1 or SEC1; certbot's `privkey.pem`).
    pub key_file: PathBuf,
}

/// One entry, read and checked.
#[derive(Clone, Debug)]
pub struct TlsCert {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub key: Arc<CertifiedKey>,
}

impl PartialEq for TlsCert {
    fn eq(&self, other: &Self) -> bool {
        self.cert_file == other.cert_file
            && self.key_file == other.key_file
            && self.key.cert == other.key.cert
    }
}

impl Eq for TlsCert {}

/// Reads and checks every entry.
pub fn validate(raw: Option<Vec<RawTls>>) -> Result<Vec<TlsCert>, ConfigError> {
    raw.unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, r)| load(i, r))
        .collect()
}

fn load(i: usize, r: RawTls) -> Result<TlsCert, ConfigError> {
    let field = |f: &str| format!("http.tls[{i}].{f}");
    let read = |f: &str, p: &PathBuf| {
        std::fs::read(p).map_err(|e| {
            ConfigError::invalid(field(f), format!("cannot read {}: {e}", p.display()))
        })
    };
    let cert_pem = read("cert_file", &r.cert_file)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| {
            ConfigError::invalid(
                field("cert_file"),
                format!("{} is not PEM certificates: {e}", r.cert_file.display()),
            )
        })?;
    if certs.is_empty() {
        return Err(ConfigError::invalid(
            field("cert_file"),
            format!("{} holds no certificate", r.cert_file.display()),
        ));
    }
    if let Err(e) = webpki::EndEntityCert::try_from(&certs[0]) {
        return Err(ConfigError::invalid(
            field("cert_file"),
            format!(
                "{}: the first certificate does not parse: {e}",
                r.cert_file.display()
            ),
        ));
    }
    check_dates(&certs[0]).map_err(|why| {
        ConfigError::invalid(
            field("cert_file"),
            format!("{}: the certificate {why}", r.cert_file.display()),
        )
    })?;
    let key_pem = read("key_file", &r.key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        ConfigError::invalid(
            field("key_file"),
            format!("{} is not a PEM private key: {e}", r.key_file.display()),
        )
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let key = CertifiedKey::from_der(certs, key, &provider).map_err(|e| {
        ConfigError::invalid(
            field("key_file"),
            format!(
                "{} is not the key of {}: {e}",
                r.key_file.display(),
                r.cert_file.display()
            ),
        )
    })?;
    Ok(TlsCert {
        cert_file: r.cert_file,
        key_file: r.key_file,
        key: Arc::new(key),
    })
}

/// `Err(why)` when the time now is outside the leaf's validity dates.
fn check_dates(leaf: &CertificateDer<'_>) -> Result<(), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| format!("does not parse as X.509: {e}"))?;
    let validity = cert.validity();
    let now = ASN1Time::now();
    if now < validity.not_before {
        return Err(format!("is not valid before {}", validity.not_before));
    }
    if now > validity.not_after {
        return Err(format!("expired on {}", validity.not_after));
    }
    Ok(())
}
