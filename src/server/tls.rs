//! Optional TLS on the hook port, and client-certificate verification (mTLS) when a
//! client CA is given — what Metacontroller's `caBundle` and `clientTLS` pair with.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

/// Why the TLS files cannot serve, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a PEM {what} file: {source}")]
    NotPem {
        path: String,
        what: &'static str,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{path} contains no PEM {what}")]
    Empty { path: String, what: &'static str },
    #[error("{path} holds a certificate rustls cannot use: {source}")]
    UnusableCa { path: String, source: rustls::Error },
    #[error("cannot build the client-certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("the TLS certificate and key do not form a usable pair: {0}")]
    Pair(rustls::Error),
    #[error("cannot set up TLS protocol versions: {0}")]
    Protocols(rustls::Error),
}

/// The PEM files of the hook port's TLS.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// Certificate chain.
    pub cert: PathBuf,
    /// Private key of the certificate.
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by this CA.
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// # Errors
    /// A file cannot be read or holds no usable PEM item, or the certificate and key do
    /// not match.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs = read_certs(&self.cert)?;
        let key = read_key(&self.key)?;
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Protocols)?;
        let builder = match &self.client_ca {
            Some(ca_path) => {
                let mut roots = RootCertStore::empty();
                for cert in read_certs(ca_path)? {
                    roots.add(cert).map_err(|source| TlsError::UnusableCa {
                        path: ca_path.display().to_string(),
                        source,
                    })?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(TlsError::Pair)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

fn read(path: &PathBuf) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn read_certs(path: &PathBuf) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let what = "certificate";
    let certs = CertificateDer::pem_slice_iter(&read(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::NotPem {
            path: path.display().to_string(),
            what,
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            path: path.display().to_string(),
            what,
        });
    }
    Ok(certs)
}

fn read_key(path: &PathBuf) -> Result<PrivateKeyDer<'static>, TlsError> {
    let what = "private key";
    match PrivateKeyDer::from_pem_slice(&read(path)?) {
        Ok(key) => Ok(key),
        Err(rustls::pki_types::pem::Error::NoItemsFound) => Err(TlsError::Empty {
            path: path.display().to_string(),
            what,
        }),
        Err(source) => Err(TlsError::NotPem {
            path: path.display().to_string(),
            what,
            source,
        }),
    }
}
