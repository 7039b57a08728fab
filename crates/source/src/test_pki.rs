//! Certificates and TLS origins for tests of the source engine's https paths.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;

/// A CA, a server certificate for `localhost` it signed, and a client certificate it
/// signed; all PEM.
pub(crate) struct Pki {
    pub(crate) ca: String,
    pub(crate) server: (String, String),
    pub(crate) client: (String, String),
}

pub(crate) fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let mut ca_params = CertificateParams::new(Vec::new()).unwrap_or_else(|e| panic!("{e}"));
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params
        .self_signed(&ca_key)
        .unwrap_or_else(|e| panic!("{e}"));
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let leaf = |name: &str| {
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let cert = CertificateParams::new(vec![name.to_owned()])
            .and_then(|p| p.signed_by(&key, &issuer))
            .unwrap_or_else(|e| panic!("{e}"));
        (cert.pem(), key.serialize_pem())
    };
    Pki {
        ca: ca.pem(),
        server: leaf("localhost"),
        client: leaf("client"),
    }
}

/// A TLS origin answering one request with `answer`; it asks for a client certificate
/// signed by `client_ca` when given one.
pub(crate) fn tls_origin(pki: &Pki, client_ca: Option<&str>, answer: &'static str) -> u16 {
    use rustls_pki_types::pem::PemObject;
    let certs: Vec<_> = rustls_pki_types::CertificateDer::pem_slice_iter(pki.server.0.as_bytes())
        .map(|c| c.unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(pki.server.1.as_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap_or_else(|e| panic!("{e}"));
    let config = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in crate::tls::certificates(ca).unwrap_or_else(|e| panic!("{e}")) {
                roots.add(cert).unwrap_or_else(|e| panic!("{e}"));
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    }
    .with_single_cert(certs, key)
    .unwrap_or_else(|e| panic!("{e}"));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let config = Arc::new(config);
    std::thread::spawn(move || {
        let Ok((socket, _)) = listener.accept() else {
            return;
        };
        let Ok(connection) = rustls::ServerConnection::new(config) else {
            return;
        };
        let mut stream = rustls::StreamOwned::new(connection, socket);
        if read_head(&mut stream) {
            let _ = stream.write_all(answer.as_bytes());
            stream.conn.send_close_notify();
            let _ = stream.flush();
        }
    });
    port
}

pub(crate) fn material(
    ca: Option<&str>,
    client: Option<&(String, String)>,
) -> crate::tls::TlsMaterial {
    crate::tls::TlsMaterial {
        secret: "tls".to_owned(),
        binding: crate::binding::Binding::Refused(crate::binding::Refusal::Unbound),
        ca_pem: ca.map(str::to_owned),
        cert_pem: client.map(|c| c.0.clone()),
        key_pem: client.map(|c| c.1.clone()),
    }
}

/// Reads a request head; whether one came.
fn read_head(stream: &mut impl Read) -> bool {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return false,
        }
    }
    true
}
