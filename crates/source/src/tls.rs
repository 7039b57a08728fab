//! One TLS client for every https source, git and HTTP alike (rustls): the public web
//! roots, plus the server's `--source-ca-file`, plus a source's own `ca.crt`; a client
//! certificate when the source's Secret has `tls.crt` and `tls.key` (mutual TLS). git
//! over https goes through the same HTTP client as HTTP sources ([`super::client`] is
//! libgit2's transport, see [`super::git`]), so a private CA or a client certificate works
//! the same on both paths and a certificate problem reads the same on both.

use std::sync::Arc;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};

use super::FetchError;
use super::binding::Binding;

/// Longest PEM text read from a file or a Secret key (a CA bundle of a few hundred
/// certificates fits).
pub const MAX_PEM_BYTES: usize = 512 * 1024;

/// A source's TLS settings from its `certSecretRef` Secret.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsMaterial {
    /// The Secret they came from (named in refusals).
    pub secret: String,
    /// Where they may be used (the Secret's `sources.metahooks.io/allowed-urls`).
    pub binding: Binding,
    /// `ca.crt`: CAs trusted for this source besides the others.
    pub ca_pem: Option<String>,
    /// `tls.crt`: the client certificate chain.
    pub cert_pem: Option<String>,
    /// `tls.key`: the client certificate's private key.
    pub key_pem: Option<String>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsMaterial({:?}, <redacted>)", self.secret)
    }
}

impl TlsMaterial {
    /// Refuses `url` unless the Secret's binding covers it.
    pub fn check_url(&self, url: &str) -> Result<(), FetchError> {
        self.binding
            .check(url)
            .map_err(|why| FetchError::CredentialsNotAllowed {
                secret: self.secret.clone(),
                url: super::redact_url(url),
                why,
            })
    }

    /// Checks that every part parses, so a bad Secret is named when it is read rather
    /// than at the first connection.
    ///
    /// # Errors
    /// The key and the problem, in words for the Secret's owner.
    pub fn validate(&self) -> Result<(), MaterialError> {
        let in_key = |key: &'static str| move |problem| MaterialError::Key { key, problem };
        if let Some(ca) = &self.ca_pem {
            certificates(ca).map_err(in_key("ca.crt"))?;
        }
        match (&self.cert_pem, &self.key_pem) {
            (Some(cert), Some(key)) => {
                certificates(cert).map_err(in_key("tls.crt"))?;
                private_key(key).map_err(in_key("tls.key"))?;
            }
            (Some(_), None) => return Err(MaterialError::CertificateWithoutKey),
            (None, Some(_)) => return Err(MaterialError::KeyWithoutCertificate),
            (None, None) if self.ca_pem.is_none() => return Err(MaterialError::Empty),
            (None, None) => {}
        }
        Ok(())
    }

    /// Part of the cache keys: a source reached with other trust or another client
    /// certificate is another fetch.
    pub fn fingerprint(&self) -> String {
        let mut parts = metahooks_hash::Parts::new();
        for part in [&self.ca_pem, &self.cert_pem, &self.key_pem] {
            parts.part(part.as_deref().unwrap_or("\u{0}none").as_bytes());
        }
        hex::encode(&parts.finish()[..8])
    }
}

/// Why a Secret's TLS material cannot be used, in words for the Secret's owner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // each variant is described by its #[error] message
pub enum MaterialError {
    #[error("`{key}`: {problem}")]
    Key {
        key: &'static str,
        problem: PemError,
    },
    #[error("`tls.crt` needs `tls.key` beside it")]
    CertificateWithoutKey,
    #[error("`tls.key` needs `tls.crt` beside it")]
    KeyWithoutCertificate,
    #[error("it needs `ca.crt`, or `tls.crt` and `tls.key`")]
    Empty,
}

/// Why PEM text holds no usable certificate or key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // each variant is described by its #[error] message
pub enum PemError {
    #[error("{bytes} bytes; at most {MAX_PEM_BYTES} are read")]
    TooLarge { bytes: usize },
    #[error("not PEM: {0}")]
    NotPem(String),
    #[error("no `BEGIN CERTIFICATE` block in it")]
    NoCertificate,
    #[error("no private key (PKCS#8, PKCS#1 or SEC1 PEM) in it: {0}")]
    NoPrivateKey(String),
}

/// Every certificate in `pem`; at least one.
///
/// # Errors
/// Too large, not PEM, or no certificate in it.
pub fn certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, PemError> {
    if pem.len() > MAX_PEM_BYTES {
        return Err(PemError::TooLarge { bytes: pem.len() });
    }
    let found: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(pem.as_bytes()).collect();
    let found = found.map_err(|e| PemError::NotPem(e.to_string()))?;
    if found.is_empty() {
        return Err(PemError::NoCertificate);
    }
    Ok(found)
}

fn private_key(pem: &str) -> Result<PrivateKeyDer<'static>, PemError> {
    if pem.len() > MAX_PEM_BYTES {
        return Err(PemError::TooLarge { bytes: pem.len() });
    }
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| PemError::NoPrivateKey(e.to_string()))
}

/// The TLS client settings for a fetch: roots, extra CAs and a client certificate.
///
/// # Errors
/// A CA or client certificate that does not parse (`TlsMaterialInvalid`, naming where
/// it came from).
pub fn client_config(
    server_ca: Option<&str>,
    material: Option<&TlsMaterial>,
) -> Result<Arc<rustls::ClientConfig>, FetchError> {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let mut add = |pem: &str, whence: &str| -> Result<(), FetchError> {
        for certificate in certificates(pem).map_err(|e| tls_invalid(whence, &e))? {
            roots
                .add(certificate)
                .map_err(|e| tls_invalid(whence, &e))?;
        }
        Ok(())
    };
    if let Some(pem) = server_ca {
        add(pem, "--source-ca-file")?;
    }
    if let Some(pem) = material.and_then(|m| m.ca_pem.as_deref()) {
        add(
            pem,
            &format!(
                "`ca.crt` of Secret {:?}",
                material.map(|m| m.secret.as_str()).unwrap_or_default()
            ),
        )?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| tls_invalid("the TLS protocol settings", &e))?
    .with_root_certificates(roots);
    let client_pair =
        material.and_then(|m| Some((m, m.cert_pem.as_deref()?, m.key_pem.as_deref()?)));
    let mut config = match client_pair {
        Some((m, cert, key)) => {
            let whence = |part: &str, e: &dyn std::fmt::Display| {
                tls_invalid(&format!("`{part}` of Secret {:?}", m.secret), e)
            };
            let chain = certificates(cert).map_err(|e| whence("tls.crt", &e))?;
            let key = private_key(key).map_err(|e| whence("tls.key", &e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| whence("tls.key", &e))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The certificate problem behind a failed connection, in rustls' words, if that is what
/// it was: found anywhere in the error's source chain.
pub fn certificate_problem(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(rustls_error) = error.downcast_ref::<rustls::Error>() {
            return is_certificate_error(rustls_error).then(|| rustls_error.to_string());
        }
        // An io::Error's `source()` skips the error it wraps; `get_ref` is that error.
        current = match error.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => error.source(),
        };
    }
    None
}

fn is_certificate_error(error: &rustls::Error) -> bool {
    matches!(
        error,
        rustls::Error::InvalidCertificate(_)
            | rustls::Error::NoCertificatesPresented
            | rustls::Error::UnsupportedNameType
            | rustls::Error::AlertReceived(
                rustls::AlertDescription::BadCertificate
                    | rustls::AlertDescription::CertificateRequired
                    | rustls::AlertDescription::UnknownCA
                    | rustls::AlertDescription::CertificateUnknown
                    | rustls::AlertDescription::CertificateExpired
                    | rustls::AlertDescription::CertificateRevoked
                    | rustls::AlertDescription::AccessDenied
            )
    )
}

/// The server-wide CA bundle of `--source-ca-file`, read and checked at start-up.
///
/// # Errors
/// The file cannot be read or holds no certificate.
pub fn read_ca_file(path: &std::path::Path) -> Result<String, CaFileError> {
    let text = std::fs::read_to_string(path).map_err(|error| CaFileError::Unreadable {
        path: path.to_owned(),
        error: error.to_string(),
    })?;
    certificates(&text).map_err(|problem| CaFileError::Invalid {
        path: path.to_owned(),
        problem,
    })?;
    Ok(text)
}

/// Why `--source-ca-file` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // each variant is described by its #[error] message
pub enum CaFileError {
    #[error("cannot read --source-ca-file {}: {error}", path.display())]
    Unreadable {
        path: std::path::PathBuf,
        error: String,
    },
    #[error("--source-ca-file {}: {problem}", path.display())]
    Invalid {
        path: std::path::PathBuf,
        problem: PemError,
    },
}

/// `whence` (a flag, or a part of a Secret) does not hold what TLS needs.
fn tls_invalid(whence: &str, detail: &dyn std::fmt::Display) -> FetchError {
    FetchError::TlsMaterialInvalid {
        whence: whence.to_owned(),
        detail: detail.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn material(ca: Option<&str>, cert: Option<&str>, key: Option<&str>) -> TlsMaterial {
        TlsMaterial {
            secret: "tls".to_owned(),
            binding: Binding::Refused(crate::binding::Refusal::Unbound),
            ca_pem: ca.map(str::to_owned),
            cert_pem: cert.map(str::to_owned),
            key_pem: key.map(str::to_owned),
        }
    }

    #[test]
    fn a_secret_is_checked_part_by_part() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["client".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (cert, key) = (cert.pem(), key.serialize_pem());
        assert_eq!(material(Some(&cert), None, None).validate(), Ok(()));
        assert_eq!(material(None, Some(&cert), Some(&key)).validate(), Ok(()));
        let error = material(Some("junk"), None, None).validate().unwrap_err();
        assert_eq!(
            error,
            MaterialError::Key {
                key: "ca.crt",
                problem: PemError::NoCertificate
            }
        );
        assert_eq!(
            error.to_string(),
            "`ca.crt`: no `BEGIN CERTIFICATE` block in it"
        );
        let error = material(None, Some(&cert), None).validate().unwrap_err();
        assert_eq!(error, MaterialError::CertificateWithoutKey);
        let error = material(None, Some(&cert), Some(&cert))
            .validate()
            .unwrap_err();
        assert!(
            matches!(
                error,
                MaterialError::Key {
                    key: "tls.key",
                    problem: PemError::NoPrivateKey(_)
                }
            ),
            "{error}"
        );
        assert_eq!(
            material(None, None, None).validate(),
            Err(MaterialError::Empty)
        );
        assert!(client_config(None, Some(&material(None, Some(&cert), Some(&key)))).is_ok());
        assert_ne!(
            material(Some(&cert), None, None).fingerprint(),
            material(None, Some(&cert), Some(&key)).fingerprint()
        );
    }
}
