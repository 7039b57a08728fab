//! A loopback relay that every git:// and ssh:// connection of one libgit2 fetch goes
//! through, so that the address checked is the address connected to.
//!
//! libgit2 resolves host names itself. Without this guard a name could resolve to a
//! public address when checked and to a private one when libgit2 connects (DNS
//! rebinding). The guard stands in for the server: it resolves the destination once,
//! checks every address against the policy, connects to the address it checked and
//! relays the bytes (ssh is encrypted end to end; the host key is checked against the
//! original host name, see [`super::known_hosts`]). http and https need no guard: libgit2
//! speaks them through the engine's HTTP client ([`super::git`]'s smart HTTP transport).
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
use super::lock;
use super::policy::Policy;

mod origin;
mod probe;
mod relay;
pub use probe::probe_certificate;
use relay::serve;

/// The running guard of one fetch; stops when dropped.
pub struct ConnectGuard {
    address: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
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
    host: String,
    port: u16,
    deadline: Instant,
    stop: AtomicBool,
    refusal: Mutex<Option<FetchError>>,
    phase: AtomicU8,
    /// Bytes received from the remote in each phase.
    received: [AtomicU64; 2],
    /// The URL as people see it, for refusals.
    shown: String,
}

impl ConnectGuard {
    /// Starts a guard for a fetch of `url` (git or ssh) that must end by `deadline`.
    ///
    /// # Errors
    /// [`FetchError::EngineFailed`] when no loopback port can be had.
    pub fn start(
        policy: &Policy,
        url: &url::Url,
        deadline: Instant,
    ) -> Result<ConnectGuard, FetchError> {
        let host = url.host_str().unwrap_or_default();
        let port = url.port_or_known_default().unwrap_or(match url.scheme() {
            "git" => 9418,
            _ => 22,
        });
        let cannot = |e: std::io::Error| FetchError::EngineFailed {
            detail: format!("cannot start the connection guard: {e}"),
        };
        let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(cannot)?;
        let address = listener.local_addr().map_err(cannot)?;
        let shared = Arc::new(Shared {
            policy: policy.clone(),
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
            deadline,
            stop: AtomicBool::new(false),
            refusal: Mutex::new(None),
            phase: AtomicU8::new(Phase::Refs as u8),
            received: [AtomicU64::new(0), AtomicU64::new(0)],
            shown: super::redact_url(url.as_str()),
        });
        let accept_shared = shared.clone();
        let accept = std::thread::Builder::new()
            .name("connect-guard".to_owned())
            .spawn(move || accept_loop(&listener, &accept_shared))
            .map_err(cannot)?;
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

    /// The URL libgit2 should fetch from: the same path on the guard's address. An
    /// scp-like address (`raw`) keeps its relative path in libgit2's bracketed form,
    /// `[user@127.0.0.1:port]:path`.
    pub fn remote_url(&self, url: &url::Url, raw: &str) -> String {
        if let Some(scp) = super::policy::ScpUrl::parse(raw) {
            let user = scp.user.map(|u| format!("{u}@")).unwrap_or_default();
            return format!("[{user}{}]:{}", self.address, scp.path);
        }
        let mut local = url.clone();
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
    use std::io::Read;

    use super::*;

    #[test]
    fn a_private_destination_is_refused_at_connect_time() {
        let url = url::Url::parse("git://127.0.0.1/repo.git").unwrap_or_else(|e| panic!("{e}"));
        let deadline = Instant::now() + Duration::from_secs(30);
        let guard = ConnectGuard::start(&Policy::default(), &url, deadline)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut stream = TcpStream::connect(guard.address()).unwrap_or_else(|e| panic!("{e}"));
        // The guard closes the connection without a byte: nothing was reached.
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        assert!(answer.is_empty(), "{answer:?}");
        assert_eq!(guard.refusal().map(|r| r.reason()), Some("HostRefused"));
    }
}
