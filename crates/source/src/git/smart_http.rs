//! git's smart HTTP protocol for libgit2, spoken by the client an HTTP file source uses
//! ([`crate::client`]), with its address policy, egress proxy, TLS settings and
//! error words. libgit2 takes this as its `http://` and `https://` transport and so
//! never opens a connection of its own: every name is resolved through the policy (the
//! address checked is the address connected to), and chunks, HTTP/1.0 and proxies are
//! hyper's to speak.
//!
//! Every byte the remote sends counts against the fetch's download and ref caps together
//! before anything decodes it (heads included), what it decodes to against its phase's
//! cap (the ref advertisement has its own, far below the pack's), and every request ends
//! at the fetch's deadline: libgit2's own checks only run while a pack is received.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use git2::transport::{Service, SmartSubtransport, SmartSubtransportStream, Transport};
use http::header::{ACCEPT, CONTENT_TYPE, LOCATION, USER_AGENT};
use http_body_util::Full;
use hyper::body::Incoming;

use crate::client::{self, Body, HttpClient, Meter, MeteredClient};
use crate::policy::Policy;
use crate::tls::TlsMaterial;
use crate::{Credentials, FetchError, http as source_http, lock};

/// Redirect hops the ref listing follows (all within the origin).
const MAX_REDIRECTS: usize = 5;
/// Longest negotiation (`want` and `have` lines) libgit2 may send in one request.
const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;
/// Some git hosts serve the smart protocol only to clients that name themselves git.
const AGENT: &str = concat!("git/2.0 (metahooks/", env!("CARGO_PKG_VERSION"), ")");

thread_local! {
    /// The fetch running on this thread: libgit2 calls the transport factory on the
    /// thread that fetches, with nothing of ours but the remote.
    static CURRENT: RefCell<Option<Arc<Exchange>>> = const { RefCell::new(None) };
}

/// Makes this module libgit2's http and https transport. Must run before any remote of
/// the process is created; see the caller's `Once`.
///
/// # Safety
/// libgit2's transport table is a process global written without a lock: no other
/// thread may create a remote meanwhile.
#[allow(unsafe_code)]
pub(super) unsafe fn register() {
    for scheme in ["http", "https"] {
        // SAFETY: as this function's contract says.
        let _ = unsafe { git2::transport::register(scheme, factory) };
    }
}

fn factory(remote: &git2::Remote<'_>) -> Result<Transport, git2::Error> {
    let exchange = CURRENT
        .with(|current| current.borrow().clone())
        .ok_or_else(|| git2::Error::from_str("http(s) remotes are fetched through a session"))?;
    Transport::smart(remote, true, Subtransport { exchange })
}

/// One fetch's http(s) side, installed for this thread while it lives.
pub(super) struct SmartHttp {
    exchange: Arc<Exchange>,
}

struct Exchange {
    runtime: tokio::runtime::Runtime,
    client: MeteredClient,
    meter: Arc<Meter>,
    policy: Arc<Policy>,
    credentials: Option<Credentials>,
    tls: Option<TlsMaterial>,
    shown: String,
    deadline: Instant,
    /// The repository's URL once the ref listing was redirected (within the origin).
    moved: Mutex<Option<String>>,
    /// Bytes received in each phase: the ref listing, then the negotiation and pack.
    received: [AtomicU64; 2],
    refusal: Mutex<Option<FetchError>>,
}

impl SmartHttp {
    /// Installs the transport's settings for fetches on this thread.
    ///
    /// # Errors
    /// [`FetchError::EngineFailed`] when the client or its runtime cannot be built.
    pub(super) fn install(
        shown: &str,
        credentials: Option<&Credentials>,
        tls: Option<&TlsMaterial>,
        policy: &Policy,
        deadline: Instant,
    ) -> Result<SmartHttp, FetchError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| FetchError::EngineFailed {
                detail: format!("cannot start the HTTP client: {e}"),
            })?;
        let policy = Arc::new(policy.clone());
        let limits = &policy.limits;
        let meter = Meter::new(
            shown,
            limits.download_bytes.saturating_add(limits.refs_bytes),
            std::time::Duration::from_secs(limits.timeout_seconds),
        );
        let exchange = Arc::new(Exchange {
            client: HttpClient::new(policy.clone(), tls, AGENT)?.metered(&meter),
            meter,
            runtime,
            policy,
            credentials: credentials.cloned(),
            tls: tls.cloned(),
            shown: shown.to_owned(),
            deadline,
            moved: Mutex::new(None),
            received: [AtomicU64::new(0), AtomicU64::new(0)],
            refusal: Mutex::new(None),
        });
        CURRENT.with(|current| current.replace(Some(exchange.clone())));
        Ok(SmartHttp { exchange })
    }

    /// Why a request was refused or cut, if one was (the first refusal).
    pub(super) fn refusal(&self) -> Option<FetchError> {
        lock(&self.exchange.refusal).clone()
    }
}

impl Drop for SmartHttp {
    fn drop(&mut self) {
        CURRENT.with(|current| current.replace(None));
    }
}

struct Subtransport {
    exchange: Arc<Exchange>,
}

impl SmartSubtransport for Subtransport {
    fn action(
        &self,
        url: &str,
        service: Service,
    ) -> Result<Box<dyn SmartSubtransportStream>, git2::Error> {
        let phase = match service {
            Service::UploadPackLs => Phase::Refs,
            Service::UploadPack => Phase::Pack,
            Service::ReceivePackLs | Service::ReceivePack => {
                return Err(git2::Error::from_str(
                    "sources are fetched, never pushed to",
                ));
            }
        };
        let repository = lock(&self.exchange.moved)
            .clone()
            .unwrap_or_else(|| url.trim_end_matches('/').to_owned());
        Ok(Box::new(Stream {
            exchange: self.exchange.clone(),
            phase,
            repository,
            request: Vec::new(),
            answer: None,
            pending: Bytes::new(),
        }))
    }

    fn close(&self) -> Result<(), git2::Error> {
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// `GET info/refs`: capped by `SourceLimits::refs_bytes`.
    Refs = 0,
    /// `POST git-upload-pack`: capped by `SourceLimits::download_bytes`.
    Pack = 1,
}

/// One request: libgit2 writes its body (the negotiation), then reads the answer, which
/// is asked for at the first read.
struct Stream {
    exchange: Arc<Exchange>,
    phase: Phase,
    repository: String,
    request: Vec<u8>,
    answer: Option<Body>,
    pending: Bytes,
}

impl Write for Stream {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.request.len() + bytes.len() > MAX_REQUEST_BYTES {
            return Err(io::Error::other("the negotiation is too long"));
        }
        self.request.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for Stream {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let exchange = self.exchange.clone();
        let outcome = exchange.runtime.block_on(async {
            let deadline = tokio::time::Instant::from_std(exchange.deadline);
            tokio::time::timeout_at(deadline, exchange.meter.run(self.fill()))
                .await
                .unwrap_or_else(|_| Err(exchange.timeout()))
        });
        if let Err(refusal) = outcome {
            let message = refusal.to_string();
            let mut first = lock(&exchange.refusal);
            first.get_or_insert(refusal);
            return Err(io::Error::other(message));
        }
        let read = buffer.len().min(self.pending.len());
        buffer[..read].copy_from_slice(&self.pending.split_to(read));
        Ok(read)
    }
}

impl Stream {
    /// Asks for the answer if not yet done, then takes its next piece of decoded bytes
    /// unless one is waiting (nothing is waiting at the end of the answer).
    async fn fill(&mut self) -> Result<(), FetchError> {
        if !self.pending.is_empty() {
            return Ok(());
        }
        let answer = match &mut self.answer {
            Some(answer) => answer,
            None => {
                let request = std::mem::take(&mut self.request);
                let answer = match self.phase {
                    Phase::Refs => self.exchange.list(&self.repository).await?,
                    Phase::Pack => self.exchange.negotiate(&self.repository, request).await?,
                };
                self.answer.insert(answer)
            }
        };
        let (shown, policy) = (&self.exchange.shown, &self.exchange.policy);
        // A piece may decode to nothing yet; an empty read would tell libgit2 the answer
        // has ended.
        while let Some(piece) = answer.next(shown, policy).await? {
            if !piece.is_empty() {
                self.exchange.count(self.phase, piece.len())?;
                self.pending = piece;
                break;
            }
        }
        Ok(())
    }
}

impl Exchange {
    /// `GET info/refs?service=git-upload-pack`, following redirects within the origin
    /// (the repository then lives where the listing was found, as git has it).
    async fn list(&self, repository: &str) -> Result<Body, FetchError> {
        let mut target = self.url(&format!("{repository}/info/refs?service=git-upload-pack"))?;
        let mut hops = 0;
        let answer = loop {
            let answer = self
                .send(client::get(&target)?, Bytes::new(), &target)
                .await?;
            if !answer.status().is_redirection() {
                break answer;
            }
            let next = self.redirect(&target, &answer)?;
            hops += 1;
            if hops > MAX_REDIRECTS {
                return Err(FetchError::Unreachable {
                    url: self.shown.clone(),
                    detail: format!("more than {MAX_REDIRECTS} redirects"),
                });
            }
            target = next;
        };
        if hops > 0 {
            let mut moved = target.clone();
            moved.set_query(None);
            let path = moved.path().trim_end_matches("/info/refs").to_owned();
            moved.set_path(&path);
            *lock(&self.moved) = Some(moved.as_str().trim_end_matches('/').to_owned());
        }
        self.accepted(answer, "application/x-git-upload-pack-advertisement")
    }

    /// `POST git-upload-pack` with libgit2's negotiation; never redirected.
    async fn negotiate(&self, repository: &str, request: Vec<u8>) -> Result<Body, FetchError> {
        let target = self.url(&format!("{repository}/git-upload-pack"))?;
        let post = client::request(http::Method::POST, &target)?
            .header(CONTENT_TYPE, "application/x-git-upload-pack-request")
            .header(ACCEPT, "application/x-git-upload-pack-result");
        let answer = self.send(post, Bytes::from(request), &target).await?;
        self.accepted(answer, "application/x-git-upload-pack-result")
    }

    fn url(&self, raw: &str) -> Result<url::Url, FetchError> {
        url::Url::parse(raw).map_err(|e| FetchError::InvalidUrl {
            url: self.shown.clone(),
            problem: e.to_string(),
        })
    }

    /// Sends with git's agent and the source's credentials; an IP written as the host is
    /// checked here (it is never resolved). A redirect to a URL the credentials' Secret
    /// does not allow is refused, not sent without them.
    async fn send(
        &self,
        request: http::request::Builder,
        body: Bytes,
        target: &url::Url,
    ) -> Result<http::Response<Incoming>, FetchError> {
        source_http::literal_check(&self.policy, target)?;
        let mut request = request.header(USER_AGENT, AGENT);
        if let Some(credentials) = &self.credentials {
            credentials.check_url(target.as_str())?;
            if let Some((user, secret)) = credentials.userpass()
                && let Ok(mut value) =
                    http::HeaderValue::from_str(&source_http::basic_auth(&user, &secret))
            {
                value.set_sensitive(true);
                request = request.header(http::header::AUTHORIZATION, value);
            }
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| FetchError::InvalidUrl {
                url: self.shown.clone(),
                problem: e.to_string(),
            })?;
        match self.client.send(request).await {
            Ok(answer) => Ok(answer),
            Err(error) => Err(source_http::explained(
                error,
                target,
                &self.shown,
                &self.policy,
                self.tls.as_ref(),
            )
            .await),
        }
    }

    /// Where a redirect of `from` leads, refused when it leaves the origin (scheme, host
    /// and port): the source's checked address and credentials stay where they were.
    fn redirect(
        &self,
        from: &url::Url,
        answer: &http::Response<Incoming>,
    ) -> Result<url::Url, FetchError> {
        let location = answer
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| FetchError::HttpStatus {
                url: self.shown.clone(),
                status: answer.status().as_u16(),
            })?;
        let next = from.join(location).map_err(|e| FetchError::InvalidUrl {
            url: crate::redact_url(location),
            problem: format!("the redirect from {} is not a URL: {e}", self.shown),
        })?;
        let origin = |u: &url::Url| {
            format!(
                "{}://{}:{}",
                u.scheme(),
                u.host_str().unwrap_or_default(),
                u.port_or_known_default().unwrap_or_default()
            )
        };
        if origin(&next) != origin(from) {
            return Err(FetchError::RedirectRefused {
                from: origin(from),
                to: origin(&next),
            });
        }
        Ok(next)
    }

    /// The answer when it is a success in git's smart protocol; else why not, in words
    /// for the person who set the URL.
    fn accepted(
        &self,
        answer: http::Response<Incoming>,
        content_type: &str,
    ) -> Result<Body, FetchError> {
        let status = answer.status();
        let url = self.shown.clone();
        if status == http::StatusCode::UNAUTHORIZED || status == http::StatusCode::FORBIDDEN {
            return Err(FetchError::AuthFailed { url });
        }
        if !status.is_success() {
            return Err(FetchError::HttpStatus {
                url,
                status: status.as_u16(),
            });
        }
        let header = |name| {
            answer
                .headers()
                .get(name)
                .and_then(|v: &http::HeaderValue| v.to_str().ok())
                .unwrap_or_default()
                .to_ascii_lowercase()
        };
        let given = header(CONTENT_TYPE);
        if given.split(';').next().map(str::trim) != Some(content_type) {
            return Err(FetchError::Unreachable {
                url,
                detail: format!(
                    "the answer's content type is {given:?}, not {content_type:?}: the server does not speak git's smart HTTP protocol (a repository published as plain files needs git http-backend or a git host in front of it)"
                ),
            });
        }
        Body::of(answer, &self.shown)
    }

    /// Counts `bytes` against `phase`'s cap.
    fn count(&self, phase: Phase, bytes: usize) -> Result<(), FetchError> {
        let (cap, what) = match phase {
            Phase::Refs => (self.policy.limits.refs_bytes, "the ref advertisement of"),
            Phase::Pack => (self.policy.limits.download_bytes, "the download from"),
        };
        let bytes = bytes as u64;
        let total = self.received[phase as usize].fetch_add(bytes, Ordering::SeqCst) + bytes;
        if total > cap {
            return Err(FetchError::TooLarge {
                what: format!("{what} {}", self.shown),
                limit: cap,
            });
        }
        Ok(())
    }

    fn timeout(&self) -> FetchError {
        FetchError::Timeout {
            url: self.shown.clone(),
            seconds: self.policy.limits.timeout_seconds,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::time::Duration;

    use super::*;
    use crate::test_pki::{material, pki, tls_origin};

    const ADVERTISEMENT: &str = "HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-advertisement\r\nContent-Length: 34\r\nConnection: close\r\n\r\n001e# service=git-upload-pack\n0000";

    fn loose() -> Policy {
        Policy {
            allow_private_addresses: true,
            ..Policy::default()
        }
    }

    /// Lists `repository` as libgit2's first action would; the refusal when refused.
    fn list(policy: &Policy, repository: &str, tls: Option<&TlsMaterial>) -> SmartHttp {
        list_with(policy, repository, tls, None)
    }

    fn list_with(
        policy: &Policy,
        repository: &str,
        tls: Option<&TlsMaterial>,
        credentials: Option<&Credentials>,
    ) -> SmartHttp {
        let deadline = Instant::now() + Duration::from_secs(30);
        let http = SmartHttp::install(repository, credentials, tls, policy, deadline)
            .unwrap_or_else(|e| panic!("{e}"));
        let exchange = &http.exchange;
        if let Err(refusal) = exchange.runtime.block_on(exchange.list(repository)) {
            lock(&exchange.refusal).replace(refusal);
        }
        http
    }

    /// A plain origin answering one request per connection with `answers` in turn; the
    /// request heads it got.
    fn origin(answers: Vec<Vec<u8>>) -> (u16, std::thread::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        let server = std::thread::spawn(move || {
            let mut heads = Vec::new();
            for answer in answers {
                let (mut connection, _) = listener.accept().unwrap_or_else(|e| panic!("{e}"));
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && connection.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                heads.push(String::from_utf8_lossy(&head).into_owned());
                let _ = connection.write_all(&answer);
            }
            heads
        });
        (port, server)
    }

    #[test]
    fn a_private_destination_is_refused_before_connecting() {
        let http = list(&Policy::default(), "http://127.0.0.1:1/repo.git", None);
        assert_eq!(http.refusal().map(|r| r.reason()), Some("HostRefused"));
    }

    #[test]
    fn https_origins_are_checked_against_the_sources_ca() {
        let pki = pki();
        let port = tls_origin(&pki, None, ADVERTISEMENT);
        let url = format!("https://localhost:{port}/repo.git");
        let trusted = list(&loose(), &url, Some(&material(Some(&pki.ca), None)));
        assert_eq!(trusted.refusal(), None);

        let port = tls_origin(&pki, None, ADVERTISEMENT);
        let url = format!("https://localhost:{port}/repo.git");
        let untrusted = list(&loose(), &url, None);
        let refusal = untrusted.refusal().unwrap_or_else(|| panic!("refused"));
        assert_eq!(refusal.reason(), "CertificateInvalid", "{refusal}");
        assert!(refusal.to_string().contains("UnknownIssuer"), "{refusal}");
    }

    #[test]
    fn a_client_certificate_is_presented_when_the_source_has_one() {
        let pki = pki();
        let port = tls_origin(&pki, Some(&pki.ca), ADVERTISEMENT);
        let url = format!("https://localhost:{port}/repo.git");
        let with_certificate = material(Some(&pki.ca), Some(&pki.client));
        assert_eq!(
            list(&loose(), &url, Some(&with_certificate)).refusal(),
            None
        );

        let port = tls_origin(&pki, Some(&pki.ca), ADVERTISEMENT);
        let url = format!("https://localhost:{port}/repo.git");
        let without = list(&loose(), &url, Some(&material(Some(&pki.ca), None)));
        let refusal = without.refusal().unwrap_or_else(|| panic!("refused"));
        assert_eq!(refusal.reason(), "CertificateInvalid", "{refusal}");
    }

    #[test]
    fn a_redirect_within_the_origin_moves_the_repository_and_one_leaving_it_is_refused() {
        let moved = "HTTP/1.1 301 Moved\r\nLocation: /other.git/info/refs?service=git-upload-pack\r\nContent-Length: 0\r\n\r\n";
        let (port, server) = origin(vec![moved.into(), ADVERTISEMENT.into()]);
        let http = list(&loose(), &format!("http://127.0.0.1:{port}/repo.git"), None);
        assert_eq!(http.refusal(), None);
        let heads = server.join().unwrap_or_default();
        assert!(
            heads[1].starts_with("GET /other.git/info/refs?service=git-upload-pack HTTP/1.1"),
            "{heads:?}"
        );
        assert!(heads[1].contains("user-agent: git/2.0"), "{heads:?}");
        assert_eq!(
            lock(&http.exchange.moved).as_deref(),
            Some(format!("http://127.0.0.1:{port}/other.git").as_str())
        );

        let away = "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/elsewhere\r\nContent-Length: 0\r\n\r\n";
        let (port, server) = origin(vec![away.into()]);
        let http = list(&loose(), &format!("http://127.0.0.1:{port}/repo.git"), None);
        assert_eq!(http.refusal().map(|r| r.reason()), Some("RedirectRefused"));
        let _ = server.join();
    }

    #[test]
    fn files_served_in_place_of_the_protocol_are_refused_naming_it() {
        let page = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi";
        let (port, server) = origin(vec![page.into()]);
        let http = list(&loose(), &format!("http://127.0.0.1:{port}/repo.git"), None);
        let refusal = http.refusal().unwrap_or_else(|| panic!("refused"));
        assert_eq!(refusal.reason(), "Unreachable");
        assert!(refusal.to_string().contains("smart HTTP"), "{refusal}");
        let _ = server.join();
    }

    #[test]
    fn credentials_follow_a_redirect_only_where_their_secret_allows() {
        let moved = "HTTP/1.1 301 Moved\r\nLocation: /team-b/repo.git/info/refs?service=git-upload-pack\r\nContent-Length: 0\r\n\r\n";
        let (port, server) = origin(vec![moved.into()]);
        let repository = format!("http://127.0.0.1:{port}/team-a/repo.git");
        let credentials = Credentials {
            secret: "team-a".to_owned(),
            binding: crate::binding::Binding::read(
                "team-a",
                None,
                Some(&format!("http://127.0.0.1:{port}/team-a/")),
            ),
            username: Some("reader".to_owned()),
            password: Some("s3cret".to_owned()),
            ..Credentials::default()
        };
        let http = list_with(&loose(), &repository, None, Some(&credentials));
        let refusal = http.refusal().unwrap_or_else(|| panic!("refused"));
        assert_eq!(refusal.reason(), "CredentialsNotAllowed", "{refusal}");
        assert!(refusal.to_string().contains("/team-b/"), "{refusal}");
        let heads = server.join().unwrap_or_default();
        assert!(heads[0].contains("authorization: Basic"), "{heads:?}");
    }

    #[test]
    fn endless_informational_heads_are_cut_before_the_fetchs_byte_cap() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        let server = std::thread::spawn(move || {
            let (mut connection, _) = listener.accept().unwrap_or_else(|e| panic!("{e}"));
            let mut request = [0u8; 4096];
            let _ = connection.read(&mut request);
            let head = b"HTTP/1.1 100 Continue\r\nx-filler: aaaaaaaaaaaaaaaa\r\n\r\n";
            let mut sent = 0u64;
            while connection.write_all(head).is_ok() {
                sent += head.len() as u64;
            }
            sent
        });
        let mut policy = loose();
        policy.limits.refs_bytes = 256 * 1024;
        policy.limits.download_bytes = 1024 * 1024;
        let http = list(&policy, &format!("http://127.0.0.1:{port}/repo.git"), None);
        let refusal = http.refusal().unwrap_or_else(|| panic!("cut"));
        // The answer heads' own cut comes first, long before the fetch's byte cap.
        assert!(
            matches!(refusal, FetchError::TooLarge { limit, .. } if limit == client::HEAD_BYTES),
            "{refusal}"
        );
        drop(http);
        let sent = server.join().unwrap_or(u64::MAX);
        assert!(sent < 1280 * 1024 + 32 * 1024 * 1024, "{sent} bytes sent");
    }

    #[test]
    fn an_answer_that_decodes_past_the_cap_is_cut() {
        use flate2::write::GzEncoder;
        let mut encoder = GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder
            .write_all(&vec![b'0'; 8 * 1024 * 1024])
            .unwrap_or_else(|e| panic!("{e}"));
        let bomb = encoder.finish().unwrap_or_else(|e| panic!("{e}"));
        let mut answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-advertisement\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
            bomb.len()
        )
        .into_bytes();
        answer.extend_from_slice(&bomb);
        let (port, server) = origin(vec![answer]);
        let mut policy = loose();
        policy.limits.refs_bytes = 64 * 1024;
        let repository = format!("http://127.0.0.1:{port}/repo.git");
        let deadline = Instant::now() + Duration::from_secs(30);
        let http = SmartHttp::install(&repository, None, None, &policy, deadline)
            .unwrap_or_else(|e| panic!("{e}"));
        let subtransport = Subtransport {
            exchange: http.exchange.clone(),
        };
        let mut stream = subtransport
            .action(&repository, Service::UploadPackLs)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut read = Vec::new();
        assert!(stream.read_to_end(&mut read).is_err());
        assert!(read.len() <= 64 * 1024, "{} bytes passed", read.len());
        let refusal = http.refusal().unwrap_or_else(|| panic!("cut"));
        assert_eq!(refusal.reason(), "TooLarge", "{refusal}");
        assert!(
            refusal.to_string().contains("ref advertisement"),
            "{refusal}"
        );
        let _ = server.join();
    }
}
