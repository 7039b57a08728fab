//! TLS to hook servers as Metacontroller's Go client makes it: the CA bundle a webhook
//! names (or `--hooks-ca-file`), a client certificate for mutual TLS (`clientTLS`), and
//! Go's rule that a certificate found in the trusted pool is trusted as it is, so a
//! self-signed server certificate given as the CA is accepted (for its own names only)
//! where rustls alone refuses it (`CaUsedAsEndEntity`).

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// What one webhook's TLS needs beyond the defaults, as read from its Secrets and
/// ConfigMaps when Metacontroller creates the webhook executor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct HookTls {
    /// PEM CA certificates to trust instead of the system's (`caBundle`).
    pub ca_pem: Option<Vec<u8>>,
    /// PEM client certificate chain and private key (`clientTLS`).
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

/// A client for hooks: `roots_pem` trusted instead of the built-in roots when given
/// (`add_builtin` keeps the built-in ones beside them, as `--hooks-ca-file` does), and
/// the client certificate presented when given.
///
/// # Errors
/// A PEM that holds no certificate or key, or a key that does not fit.
pub(crate) fn client(
    roots_pem: Option<&[u8]>,
    add_builtin: bool,
    identity: Option<&(Vec<u8>, Vec<u8>)>,
) -> Result<reqwest::Client, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    if add_builtin || roots_pem.is_none() {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    let mut pool = Vec::new();
    if let Some(pem) = roots_pem {
        for certificate in CertificateDer::pem_slice_iter(pem) {
            let certificate =
                certificate.map_err(|e| format!("the CA bundle is not PEM certificates: {e}"))?;
            roots
                .add(certificate.clone())
                .map_err(|e| format!("a CA certificate cannot be used: {e}"))?;
            pool.push(certificate);
        }
        if pool.is_empty() {
            return Err("the CA bundle holds no certificate".to_owned());
        }
    }
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| format!("cannot build the certificate verifier: {e}"))?;
    let verifier = Arc::new(GoVerifier { inner, pool });
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot configure TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert_pem, key_pem)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("clientTLS: the certificate is not PEM: {e}"))?;
            if chain.is_empty() {
                return Err("clientTLS: the certificate key holds no certificate".to_owned());
            }
            let key = PrivateKeyDer::from_pem_slice(key_pem)
                .map_err(|e| format!("clientTLS: the private key is not a PEM key: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("clientTLS: the key does not fit the certificate: {e}"))?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    reqwest::Client::builder()
        .use_preconfigured_tls(config)
        .build()
        .map_err(|e| format!("cannot build the hook client: {e}"))
}

/// Web PKI verification, and then Go's `x509.Certificate.Verify` exception: a server
/// certificate that is itself in the trusted pool needs no chain (crypto/x509's
/// `opts.Roots.contains(c)`), though its names must still match.
#[derive(Debug)]
struct GoVerifier {
    inner: Arc<WebPkiServerVerifier>,
    pool: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for GoVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(verified) => Ok(verified),
            Err(error) => {
                if !self.pool.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
                    return Err(error);
                }
                let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&parsed, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
