//! Why an https origin refused a fetch, asked of the origin itself: a TLS connection of
//! its own, made with the source's settings through the same address checks as every
//! connection of the guard. The TLS settings themselves are [`crate::tls`]'s; this
//! is the connection that uses them, so the dependency runs one way.

use super::origin::connect_checked;
use crate::policy::Policy;
use crate::tls::{TlsMaterial, certificate_problem, client_config};

/// Whether the server at `url` refuses a TLS connection made with this source's settings
/// for a certificate reason, in rustls' words: a connection of its own that writes a
/// request and reads the answer, to the address policy's checked addresses only, within
/// a few seconds. Used after a failed request only.
pub fn probe_certificate(
    policy: &Policy,
    url: &str,
    material: Option<&TlsMaterial>,
) -> Option<String> {
    use std::io::{Read, Write};
    let parsed = url::Url::parse(url).ok()?;
    let host = parsed
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = parsed.port_or_known_default()?;
    let timeout = std::time::Duration::from_secs(5);
    let socket = connect_checked(policy, &host, port, timeout).ok()?;
    socket.set_read_timeout(Some(timeout)).ok()?;
    socket.set_write_timeout(Some(timeout)).ok()?;
    let config = client_config(policy.source_ca_pem.as_deref(), material).ok()?;
    let name = rustls_pki_types::ServerName::try_from(host.clone()).ok()?;
    let connection = rustls::ClientConnection::new(config, name).ok()?;
    let mut stream = rustls::StreamOwned::new(connection, socket);
    let request = format!("HEAD / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    if let Err(error) = stream
        .write_all(request.as_bytes())
        .and_then(|()| stream.flush())
    {
        return certificate_problem(&error);
    }
    let mut buffer = [0u8; 512];
    match stream.read(&mut buffer) {
        Err(error) => certificate_problem(&error),
        // An answer, or a clean close, is no certificate refusal.
        Ok(read) => {
            debug_assert!(read <= buffer.len());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_pki::{material, pki, tls_origin};

    const NO_CONTENT: &str = "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n";

    #[test]
    fn a_probe_hears_a_server_refuse_a_missing_client_certificate() {
        let loose = Policy {
            allow_private_addresses: true,
            ..Policy::default()
        };
        let pki = pki();
        let port = tls_origin(&pki, Some(&pki.ca), NO_CONTENT);
        let url = format!("https://localhost:{port}/app.env");
        let heard = probe_certificate(&loose, &url, Some(&material(Some(&pki.ca), None)));
        let heard = heard.unwrap_or_else(|| panic!("the refusal is heard"));
        assert!(
            heard.contains("CertificateRequired") || heard.contains("certificate"),
            "{heard}"
        );
        // A server that accepts the connection is no certificate problem.
        let port = tls_origin(&pki, Some(&pki.ca), NO_CONTENT);
        let url = format!("https://localhost:{port}/app.env");
        let with_certificate = material(Some(&pki.ca), Some(&pki.client));
        assert_eq!(
            probe_certificate(&loose, &url, Some(&with_certificate)),
            None
        );
        // Nor is a private address the policy refuses probed at all.
        assert_eq!(probe_certificate(&Policy::default(), &url, None), None);
    }
}
