//! TLS for `talaria serve` off loopback: a certificate chain and key from PEM files, served
//! with rustls (ring).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Why TLS cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the certificate {path}: {detail}")]
    Certificate { path: String, detail: String },
    #[error("cannot read the private key {path}: {detail}")]
    Key { path: String, detail: String },
    #[error("the certificate and key do not make a TLS server: {0}")]
    Config(String),
}

/// A TLS acceptor for the certificate chain in `cert` and the key in `key`.
pub fn acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect())
        .map_err(|e| TlsError::Certificate {
            path: cert.display().to_string(),
            detail: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Certificate {
            path: cert.display().to_string(),
            detail: "it holds no certificate".into(),
        });
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::Key {
        path: key.display().to_string(),
        detail: e.to_string(),
    })?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| TlsError::Config(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .map_err(|e| TlsError::Config(e.to_string()))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
