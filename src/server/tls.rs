//! Optional TLS on the hook port, and client-certificate verification (mTLS) when a
//! client CA is given — what Metacontroller's `caBundle` and `clientTLS` pair with.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use axum_server::tls_rustls::RustlsConfig;
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by this CA.
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    pub fn server_config(&self) -> anyhow::Result<RustlsConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs = read_certs(&self.cert)?;
        let key = read_key(&self.key)?;
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .context("cannot set up TLS protocol versions")?;
        let builder = match &self.client_ca {
            Some(ca_path) => {
                let mut roots = RootCertStore::empty();
                for cert in read_certs(ca_path)? {
                    roots.add(cert).with_context(|| {
                        format!(
                            "{} holds a certificate rustls cannot use",
                            ca_path.display()
                        )
                    })?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .context("cannot build the client-certificate verifier")?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .context("the TLS certificate and key do not form a usable pair")?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(RustlsConfig::from_config(Arc::new(config)))
    }
}

fn read_certs(path: &PathBuf) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{} is not a PEM certificate file", path.display()))?;
    if certs.is_empty() {
        anyhow::bail!("{} contains no PEM certificate", path.display());
    }
    Ok(certs)
}

fn read_key(path: &PathBuf) -> anyhow::Result<PrivateKeyDer<'static>> {
    let pem = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    match PrivateKeyDer::from_pem_slice(&pem) {
        Ok(key) => Ok(key),
        Err(rustls::pki_types::pem::Error::NoItemsFound) => {
            anyhow::bail!("{} contains no PEM private key", path.display())
        }
        Err(error) => {
            Err(error).with_context(|| format!("{} is not a PEM private key file", path.display()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_files_are_read_with_clear_errors() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
            .unwrap_or_else(|e| panic!("{e}"));
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        std::fs::write(&cert, generated.cert.pem()).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&key, generated.signing_key.serialize_pem())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read_certs(&cert).map(|c| c.len()).ok(), Some(1));
        assert!(read_key(&key).is_ok());
        let no_key = read_key(&cert).map(|_| ()).unwrap_err().to_string();
        assert!(no_key.contains("contains no PEM private key"), "{no_key}");
        std::fs::write(&cert, "not pem").unwrap_or_else(|e| panic!("{e}"));
        let no_cert = read_certs(&cert).map(|_| ()).unwrap_err().to_string();
        assert!(no_cert.contains("no PEM certificate"), "{no_cert}");
    }
}
