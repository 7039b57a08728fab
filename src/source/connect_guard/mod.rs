//! A loopback relay that every http(s) connection of one libgit2 fetch goes through, so
//! that the address checked is the address connected to.
//!
//! libgit2 resolves host names itself and follows redirects itself. Without this guard a
//! name could resolve to a public address when checked and to a private one when libgit2
//! connects (DNS rebinding), and a redirect could carry a user's token to another port or
//! host. The guard resolves each destination once, checks every address against the
//! policy, connects to the address it checked, and refuses redirects to another origin.
//! With an egress proxy ([`super::proxy`]) for the origin, the guard connects to the
//! proxy's checked address instead: https through a CONNECT tunnel (TLS still ends at
//! the origin), http with absolute-form requests; libgit2 itself never uses a proxy.
//!
//! - http and https: the guard stands in for the origin itself (libgit2 is given the
//!   guard's address, over plain http on loopback); it forwards each request to the
//!   origin, speaking TLS to it for https (rustls, with the source's CAs and client
//!   certificate, [`super::tls`]), and reads each answer's head: a redirect within the
//!   origin is pointed back at the guard, a redirect to another origin is refused.
//! - git:// and ssh://: the guard stands in for the server and relays the bytes to the
//!   checked address of the origin (ssh is encrypted end to end; the host key is checked
//!   against the original host name, see [`super::known_hosts`]).
//!
//! Every byte the remote sends is counted against the current [`Phase`]'s cap (the ref
//! advertisement has its own, far below the pack's), and every connection is closed at
//! the cap or at the fetch's deadline, whatever the remote does: libgit2's own checks
//! only run while a pack is received, never while refs are listed.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::FetchError;
use super::policy::Policy;

mod decoding;
mod exchange;
mod origin;
mod probe;
use exchange::*;
pub use origin::connect_checked;
use origin::*;
pub use probe::probe_certificate;

/// Longest request head the guard reads from libgit2.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The running guard of one fetch; stops when dropped.
pub struct ConnectGuard {
    address: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

/// Longest request body the guard reads from libgit2 before forwarding it (the
/// negotiation of a fetch: `want` and `have` lines).
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// How libgit2 reaches the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// As the server itself (http, https): origin-form requests relayed to the origin.
    Stand,
    /// As the daemon itself (git://): bytes relayed to the origin as they are.
    Raw,
}

/// What the remote is sending now; each phase has its own byte cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Listing refs (`SourceLimits::refs_bytes`).
    Refs = 0,
    /// Negotiating and sending the pack (`SourceLimits::download_bytes`).
    Pack = 1,
}

struct Shared {
    policy: Policy,
    mode: Mode,
    /// TLS to the origin (https).
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The guard's own address (where redirects within the origin are pointed).
    address: SocketAddr,
    origin: Origin,
    deadline: Instant,
    stop: AtomicBool,
    refusal: Mutex<Option<FetchError>>,
    phase: AtomicU8,
    /// Bytes received from the remote in each phase.
    received: [AtomicU64; 2],
    /// Bytes decompressed from compressed answers in each phase ([`decoding`]).
    decompressed: [AtomicU64; 2],
    /// The URL as people see it, for refusals.
    shown: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    host: String,
    port: u16,
}

impl Origin {
    /// The origin as a Host header names it.
    fn host_header(&self) -> String {
        self.to_string()
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl ConnectGuard {
    /// Starts a guard for a fetch of `url` (http, https, git or ssh) that must end by
    /// `deadline`; `tls` is how it speaks to an https origin.
    ///
    /// # Errors
    /// [`FetchError::Other`] when no loopback port can be had, or an https URL comes
    /// without TLS settings.
    pub fn start(
        policy: &Policy,
        url: &url::Url,
        deadline: Instant,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<ConnectGuard, FetchError> {
        let tls = match url.scheme() {
            "https" => Some(tls.ok_or_else(|| {
                FetchError::Other("an https fetch needs TLS settings".to_owned())
            })?),
            _ => None,
        };
        let origin = Origin {
            host: bare_host(url.host_str().unwrap_or_default()).to_owned(),
            port: url.port_or_known_default().unwrap_or(match url.scheme() {
                "git" => 9418,
                "ssh" => 22,
                _ => 443,
            }),
        };
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| FetchError::Other(format!("cannot start the connection guard: {e}")))?;
        let address = listener
            .local_addr()
            .map_err(|e| FetchError::Other(format!("cannot start the connection guard: {e}")))?;
        let mode = match url.scheme() {
            "git" | "ssh" => Mode::Raw,
            _ => Mode::Stand,
        };
        let shared = Arc::new(Shared {
            policy: policy.clone(),
            mode,
            tls,
            address,
            origin,
            deadline,
            stop: AtomicBool::new(false),
            refusal: Mutex::new(None),
            phase: AtomicU8::new(Phase::Refs as u8),
            received: [AtomicU64::new(0), AtomicU64::new(0)],
            decompressed: [AtomicU64::new(0), AtomicU64::new(0)],
            shown: super::redact_url(url.as_str()),
        });
        let accept_shared = shared.clone();
        let accept = std::thread::Builder::new()
            .name("connect-guard".to_owned())
            .spawn(move || accept_loop(&listener, &accept_shared))
            .map_err(|e| FetchError::Other(format!("cannot start the connection guard: {e}")))?;
        Ok(ConnectGuard {
            address,
            shared,
            accept: Some(accept),
        })
    }

    /// Where libgit2 reaches the guard.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The URL libgit2 should fetch from: the same path on the guard's address (plain
    /// http for an https origin: the guard speaks TLS). An scp-like address (`raw`)
    /// keeps its relative path in libgit2's bracketed form, `[user@127.0.0.1:port]:path`.
    pub fn remote_url(&self, url: &url::Url, raw: &str) -> String {
        if let Some(scp) = super::policy::ScpUrl::parse(raw) {
            let user = scp.user.map(|u| format!("{u}@")).unwrap_or_default();
            return format!("[{user}{}]:{}", self.address, scp.path);
        }
        let mut local = url.clone();
        if local.scheme() == "https" {
            let _ = local.set_scheme("http");
        }
        let _ = local.set_ip_host(self.address.ip());
        let _ = local.set_port(Some(self.address.port()));
        local.to_string()
    }

    /// Why the guard refused or cut a connection, if it did (the first refusal).
    pub fn refusal(&self) -> Option<FetchError> {
        lock(&self.shared.refusal).clone()
    }

    /// What the remote sends from now on counts against `phase`'s cap.
    pub fn enter(&self, phase: Phase) {
        self.shared.phase.store(phase as u8, Ordering::SeqCst);
    }

    /// Bytes received from the remote so far, all phases together.
    pub fn received(&self) -> u64 {
        self.shared
            .received
            .iter()
            .map(|r| r.load(Ordering::SeqCst))
            .sum()
    }
}

impl Drop for ConnectGuard {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.address, Duration::from_secs(1));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn bare_host(host: &str) -> &str {
    host.trim_start_matches('[').trim_end_matches(']')
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let shared = shared.clone();
        let _ = std::thread::Builder::new()
            .name("connect-guard-conn".to_owned())
            .spawn(move || {
                let _ = serve(stream, &shared);
            });
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    fn guard(policy: &Policy, url: &str) -> ConnectGuard {
        guard_with(policy, url, None)
    }

    fn guard_with(
        policy: &Policy,
        url: &str,
        material: Option<&crate::source::tls::TlsMaterial>,
    ) -> ConnectGuard {
        let url = url::Url::parse(url).unwrap_or_else(|e| panic!("{e}"));
        let tls =
            crate::source::tls::client_config(None, material).unwrap_or_else(|e| panic!("{e}"));
        ConnectGuard::start(
            policy,
            &url,
            Instant::now() + Duration::from_secs(30),
            Some(tls),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn ask(guard: &ConnectGuard, request: &str) -> String {
        let mut stream = TcpStream::connect(guard.address).unwrap_or_else(|e| panic!("{e}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap_or_else(|e| panic!("{e}"));
        stream
            .write_all(request.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut answer = [0u8; 64];
        let read = stream.read(&mut answer).unwrap_or(0);
        String::from_utf8_lossy(&answer[..read]).into_owned()
    }

    fn loose() -> Policy {
        Policy {
            allow_private_addresses: true,
            ..Policy::default()
        }
    }

    #[test]
    fn a_private_destination_is_refused_at_connect_time() {
        let strict = Policy::default();
        let g = guard(&strict, "https://127.0.0.1/repo.git");
        let answer = ask(&g, "GET /repo.git/info/refs HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert_eq!(g.refusal().map(|r| r.reason()), Some("HostRefused"));
    }

    /// A CA, a server certificate for `localhost` it signed, and a client certificate it
    /// signed; all PEM.
    struct Pki {
        ca: String,
        server: (String, String),
        client: (String, String),
    }

    fn pki() -> Pki {
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

    /// A TLS origin answering one request with 204; it asks for a client certificate
    /// signed by `client_ca` when given one.
    fn tls_origin(pki: &Pki, client_ca: Option<&str>) -> u16 {
        use rustls_pki_types::pem::PemObject;
        let certs: Vec<_> =
            rustls_pki_types::CertificateDer::pem_slice_iter(pki.server.0.as_bytes())
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
                for cert in crate::source::tls::certificates(ca).unwrap_or_else(|e| panic!("{e}")) {
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
            if read_head(&mut stream).is_ok() {
                let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
                stream.conn.send_close_notify();
                let _ = stream.flush();
            }
        });
        port
    }

    fn material(
        ca: Option<&str>,
        client: Option<&(String, String)>,
    ) -> crate::source::tls::TlsMaterial {
        crate::source::tls::TlsMaterial {
            secret: "tls".to_owned(),
            binding: crate::source::binding::Binding::Refused(
                crate::source::binding::Refusal::Unbound,
            ),
            ca_pem: ca.map(str::to_owned),
            cert_pem: client.map(|c| c.0.clone()),
            key_pem: client.map(|c| c.1.clone()),
        }
    }

    const GET: &str = "GET /repo.git/info/refs HTTP/1.1\r\nHost: x\r\n\r\n";

    #[test]
    fn https_origins_are_checked_against_the_sources_ca() {
        let pki = pki();
        let port = tls_origin(&pki, None);
        let url = format!("https://localhost:{port}/repo.git");
        let trusted = guard_with(&loose(), &url, Some(&material(Some(&pki.ca), None)));
        let answer = ask(&trusted, GET);
        assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");

        let port = tls_origin(&pki, None);
        let url = format!("https://localhost:{port}/repo.git");
        let untrusted = guard(&loose(), &url);
        let answer = ask(&untrusted, GET);
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        let refusal = untrusted.refusal().unwrap_or_else(|| panic!("refused"));
        assert_eq!(refusal.reason(), "CertificateInvalid", "{refusal}");
        assert!(refusal.to_string().contains("UnknownIssuer"), "{refusal}");
    }

    #[test]
    fn a_probe_hears_a_server_refuse_a_missing_client_certificate() {
        let pki = pki();
        let port = tls_origin(&pki, Some(&pki.ca));
        let url = format!("https://localhost:{port}/app.env");
        let heard = probe_certificate(&loose(), &url, Some(&material(Some(&pki.ca), None)));
        let heard = heard.unwrap_or_else(|| panic!("the refusal is heard"));
        assert!(
            heard.contains("CertificateRequired") || heard.contains("certificate"),
            "{heard}"
        );
        // A server that accepts the connection is no certificate problem.
        let port = tls_origin(&pki, Some(&pki.ca));
        let url = format!("https://localhost:{port}/app.env");
        let fine = probe_certificate(
            &loose(),
            &url,
            Some(&material(Some(&pki.ca), Some(&pki.client))),
        );
        assert_eq!(fine, None);
        // Nor is a private address the policy refuses probed at all.
        assert_eq!(probe_certificate(&Policy::default(), &url, None), None);
    }

    #[test]
    fn a_client_certificate_is_presented_when_the_source_has_one() {
        let pki = pki();
        let port = tls_origin(&pki, Some(&pki.ca));
        let url = format!("https://localhost:{port}/repo.git");
        let with_cert = guard_with(
            &loose(),
            &url,
            Some(&material(Some(&pki.ca), Some(&pki.client))),
        );
        let answer = ask(&with_cert, GET);
        assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");

        let port = tls_origin(&pki, Some(&pki.ca));
        let url = format!("https://localhost:{port}/repo.git");
        let without = guard_with(&loose(), &url, Some(&material(Some(&pki.ca), None)));
        let answer = ask(&without, GET);
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        let refusal = without.refusal().unwrap_or_else(|| panic!("refused"));
        assert_eq!(refusal.reason(), "CertificateInvalid", "{refusal}");
    }

    /// An origin that answers one request with `answer` and returns the head it got.
    fn one_shot_origin(answer: &'static str) -> (u16, std::thread::JoinHandle<String>) {
        let upstream = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let port = upstream.local_addr().map(|a| a.port()).unwrap_or(0);
        let server = std::thread::spawn(move || {
            let (mut conn, _) = upstream.accept().unwrap_or_else(|e| panic!("{e}"));
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            conn.write_all(answer.as_bytes())
                .unwrap_or_else(|e| panic!("{e}"));
            String::from_utf8_lossy(&head).into_owned()
        });
        (port, server)
    }

    #[test]
    fn plain_http_is_relayed_to_the_origin_one_request_per_connection() {
        let loose = Policy {
            allow_private_addresses: true,
            ..Policy::default()
        };
        let (port, server) =
            one_shot_origin("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
        let g = guard(&loose, &format!("http://127.0.0.1:{port}/repo.git"));
        let answer = ask(
            &g,
            "GET /repo.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n",
        );
        assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");
        let seen = server.join().unwrap_or_default();
        assert!(
            seen.starts_with("GET /repo.git/info/refs?service=git-upload-pack HTTP/1.1\r\n"),
            "{seen}"
        );
        assert!(seen.contains(&format!("Host: 127.0.0.1:{port}")), "{seen}");
        assert!(
            seen.contains("Connection: close") && !seen.contains("keep-alive"),
            "{seen}"
        );
    }

    #[test]
    fn plain_http_redirects_stay_at_the_guard_or_are_refused() {
        let loose = Policy {
            allow_private_addresses: true,
            ..Policy::default()
        };
        let (port, server) = one_shot_origin(
            "HTTP/1.1 301 Moved\r\nLocation: /other.git/info/refs\r\nContent-Length: 0\r\n\r\n",
        );
        let g = guard(&loose, &format!("http://127.0.0.1:{port}/repo.git"));
        let mut stream = TcpStream::connect(g.address).unwrap_or_else(|e| panic!("{e}"));
        stream
            .write_all(b"GET /repo.git/info/refs HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(
            answer.contains(&format!(
                "Location: http://{}/other.git/info/refs",
                g.address
            )),
            "{answer}"
        );
        let _ = server.join();
        let (port, server) = one_shot_origin(
            "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/elsewhere\r\nContent-Length: 0\r\n\r\n",
        );
        let g = guard(&loose, &format!("http://127.0.0.1:{port}/repo.git"));
        let answer = ask(&g, "GET /repo.git/info/refs HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert_eq!(g.refusal().map(|r| r.reason()), Some("RedirectRefused"));
        let _ = server.join();
    }
}
