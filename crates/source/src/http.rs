//! One file over HTTP(S), checked before and during the transfer: the client resolves
//! names through the address policy (so redirects and DNS answers are checked too),
//! follows at most a few redirects to allowed schemes, checks the status code (a 404
//! page is not a config — config-monitor rolled it out as an empty env) and stops
//! reading past the size limit.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;

use super::client::{self, Body, HttpClient, Meter, MeteredClient, SendError};
use super::policy::Policy;
use super::tls::TlsMaterial;
use super::{Content, Credentials, FetchError, Snapshot};

/// Redirect hops one fetch follows.
const MAX_REDIRECTS: usize = 5;

/// A client that applies `policy` to every connection it makes. Redirects are followed
/// by [`fetch`] itself, one hop at a time, so each hop is checked against the policy and
/// against the credentials' binding before anything is sent to it.
///
/// # Errors
/// The TLS material cannot be used.
pub fn client(policy: Arc<Policy>, tls: Option<&TlsMaterial>) -> Result<HttpClient, FetchError> {
    HttpClient::new(
        policy,
        tls,
        concat!("metahooks/", env!("CARGO_PKG_VERSION")),
    )
}

/// IP-literal hosts never reach the resolver, so they are checked here.
pub(crate) fn literal_check(policy: &Policy, url: &url::Url) -> Result<(), FetchError> {
    match url.host() {
        Some(url::Host::Ipv4(v4)) => policy.check_address(&v4.to_string(), v4.into()),
        Some(url::Host::Ipv6(v6)) => policy.check_address(&v6.to_string(), v6.into()),
        _ => Ok(()),
    }
}

/// GETs one file under `policy` (status, size and credentials checked), within the
/// policy's time limit counted from the call: name resolution, every redirect hop and
/// the body included. Every byte received counts against the download limit before it
/// is decoded, and the CPU time spent on the fetch against its time limit.
///
/// # Errors
/// A refused URL or address, credentials their Secret does not allow for the URL, an
/// error status, a coding that is not read, a body over the size limit, too many bytes
/// or too much CPU time, or a transport failure; never with user-info from the URL in
/// the message.
pub async fn fetch(
    client: &HttpClient,
    policy: &Policy,
    url: &str,
    credentials: Option<&Credentials>,
    tls: Option<&TlsMaterial>,
) -> Result<Snapshot, FetchError> {
    let seconds = policy.limits.timeout_seconds;
    let meter = Meter::new(
        &super::redact_url(url),
        policy.limits.download_bytes,
        Duration::from_secs(seconds),
    );
    let metered = client.metered(&meter);
    tokio::time::timeout(
        Duration::from_secs(seconds),
        meter.run(fetch_unbounded(&metered, policy, url, credentials, tls)),
    )
    .await
    .unwrap_or_else(|_| {
        Err(FetchError::Timeout {
            url: super::redact_url(url),
            seconds,
        })
    })
}

async fn fetch_unbounded(
    client: &MeteredClient,
    policy: &Policy,
    raw_url: &str,
    credentials: Option<&Credentials>,
    tls: Option<&TlsMaterial>,
) -> Result<Snapshot, FetchError> {
    let (response, target, shown) =
        follow_redirects(client, policy, raw_url, credentials, tls).await?;
    let url = shown.as_str();
    let status = response.status();
    if status == http::StatusCode::UNAUTHORIZED || status == http::StatusCode::FORBIDDEN {
        return Err(FetchError::AuthFailed {
            url: url.to_owned(),
        });
    }
    if !status.is_success() {
        return Err(FetchError::HttpStatus {
            url: url.to_owned(),
            status: status.as_u16(),
        });
    }
    let body = read_bounded(response, url, policy).await?;
    let name = target
        .path_segments()
        .and_then(|mut segments| segments.next_back().map(str::to_owned))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "config".to_owned());
    let revision = format!("sha256:{}", metahooks_hash::sha256_hex(&body));
    let files = [(name, Content::from_bytes(body))].into();
    Ok(Snapshot::new(revision, files, true, None))
}

/// GETs `raw_url`, following at most [`MAX_REDIRECTS`] redirects, each checked against
/// the policy: the first answer that is not a redirect, the URL that gave it, and that
/// URL as people may see it (never with user-info).
async fn follow_redirects(
    client: &MeteredClient,
    policy: &Policy,
    raw_url: &str,
    credentials: Option<&Credentials>,
    tls: Option<&TlsMaterial>,
) -> Result<(http::Response<hyper::body::Incoming>, url::Url, String), FetchError> {
    let mut shown = super::redact_url(raw_url);
    let mut target = checked(policy, raw_url)?;
    if let Some(credentials) = credentials {
        credentials.check_url(target.as_str())?;
    }
    let mut hops = 0;
    loop {
        // Credentials go to a hop only when their Secret allows its URL.
        let hop_credentials = credentials.filter(|c| c.check_url(target.as_str()).is_ok());
        let response = match send(client, &target, hop_credentials).await? {
            Ok(response) => response,
            Err(error) => return Err(explained(error, &target, &shown, policy, tls).await),
        };
        if !response.status().is_redirection() {
            return Ok((response, target, shown));
        }
        hops += 1;
        let location = response
            .headers()
            .get(http::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| FetchError::HttpStatus {
                url: shown.clone(),
                status: response.status().as_u16(),
            })?;
        let next = target.join(location).map_err(|e| FetchError::InvalidUrl {
            url: super::redact_url(location),
            problem: format!("the redirect from {shown} is not a URL: {e}"),
        })?;
        if hops > MAX_REDIRECTS {
            return Err(FetchError::Unreachable {
                url: shown,
                detail: format!("more than {MAX_REDIRECTS} redirects"),
            });
        }
        target = checked(policy, next.as_str())?;
        shown = super::redact_url(target.as_str());
    }
}

/// The body (decoded), refused as soon as it passes the policy's size limit.
async fn read_bounded(
    response: http::Response<hyper::body::Incoming>,
    url: &str,
    policy: &Policy,
) -> Result<Vec<u8>, FetchError> {
    let limit = policy.limits.config_bytes.min(policy.limits.download_bytes);
    let mut body = Body::of(response, url)?;
    let mut read = Vec::new();
    while let Some(piece) = body.next(url, policy).await? {
        if (read.len() + piece.len()) as u64 > limit {
            return Err(FetchError::TooLarge {
                what: format!("the file at {url}"),
                limit,
            });
        }
        read.extend_from_slice(&piece);
    }
    Ok(read)
}

/// A URL (the first or a redirect's) that this engine may GET: an allowed http(s)
/// scheme and, for an IP-literal host, an allowed address.
fn checked(policy: &Policy, raw: &str) -> Result<url::Url, FetchError> {
    let parsed = policy.check_url(raw).map_err(|e| match e {
        FetchError::InvalidUrl { problem, .. } => FetchError::InvalidUrl {
            url: super::redact_url(raw),
            problem,
        },
        other => other,
    })?;
    if parsed.scheme() == "file" || parsed.scheme() == "git" {
        return Err(FetchError::SchemeRefused {
            scheme: parsed.scheme().to_owned(),
        });
    }
    literal_check(policy, &parsed)?;
    Ok(parsed)
}

/// GETs `url` with `credentials` (basic or bearer).
async fn send(
    client: &MeteredClient,
    url: &url::Url,
    credentials: Option<&Credentials>,
) -> Result<Result<http::Response<hyper::body::Incoming>, SendError>, FetchError> {
    let mut request = client::get(url)?;
    if let Some(credentials) = credentials {
        let value = match (
            &credentials.username,
            &credentials.password,
            &credentials.token,
        ) {
            (Some(user), Some(password), _) => Some(basic_auth(user, password)),
            (_, _, Some(token)) => Some(format!("Bearer {token}")),
            _ => None,
        };
        if let Some(value) = value.and_then(|v| http::HeaderValue::from_str(&v).ok()) {
            let mut value = value;
            value.set_sensitive(true);
            request = request.header(http::header::AUTHORIZATION, value);
        }
    }
    let request = request
        .body(Full::new(Bytes::new()))
        .map_err(|e| FetchError::InvalidUrl {
            url: super::redact_url(url.as_str()),
            problem: e.to_string(),
        })?;
    Ok(client.send(request).await)
}

/// `Basic` credentials as RFC 7617 writes them.
pub(crate) fn basic_auth(user: &str, password: &str) -> String {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

/// A failed request as a [`FetchError`]. An https connection the server closed after the
/// handshake is how a server that wants a client certificate refuses one (TLS 1.3 sends
/// its alert after the handshake): the certificate probe then says why, in TLS's words.
pub(crate) async fn explained(
    error: SendError,
    target: &url::Url,
    shown: &str,
    policy: &Policy,
    tls: Option<&TlsMaterial>,
) -> FetchError {
    let closed = target.scheme() == "https" && error.closed_after_connecting();
    // A connection that failed through an egress proxy failed at the proxy (down, or
    // refusing the tunnel or its credentials): say which proxy.
    let proxy = target
        .host_str()
        .filter(|_| error.is_connect())
        .and_then(|host| policy.proxies.for_destination(target.scheme(), host));
    let failure = client::failure(&error, shown, policy);
    let FetchError::Unreachable { url, detail } = failure else {
        return failure;
    };
    if let Some(proxy) = proxy {
        let detail = format!("through the proxy {}: {detail}", proxy.shown());
        return FetchError::Unreachable { url, detail };
    }
    if !closed {
        return FetchError::Unreachable { url, detail };
    }
    let (policy, raw, tls) = (policy.clone(), target.to_string(), tls.cloned());
    let probed = tokio::task::spawn_blocking(move || {
        super::connect_guard::probe_certificate(&policy, &raw, tls.as_ref())
    })
    .await
    .ok()
    .flatten();
    match probed {
        Some(detail) => FetchError::CertificateInvalid { url, detail },
        None => FetchError::Unreachable { url, detail },
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::net::SocketAddr;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::policy::SourceLimits;

    /// A loopback server answering each path with a canned status and body, and keeping
    /// the request heads it saw.
    async fn serve(
        routes: &'static [(&'static str, u16, &'static str)],
    ) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
        serve_replies(move |path| {
            let (status, body) = routes
                .iter()
                .find(|(route, _, _)| *route == path)
                .map_or((404, "not here"), |(_, status, body)| (*status, *body));
            format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        })
        .await
    }

    /// A loopback server answering each request with what `reply` makes of its path (the
    /// whole answer, head included), and keeping the request heads it saw.
    async fn serve_replies(
        reply: impl Fn(&str) -> Vec<u8> + Send + 'static,
    ) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let address = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("address: {e}"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let heads = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n")
                    && stream.read(&mut byte).await.is_ok_and(|n| n == 1)
                {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
                heads
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(head);
                let _ = stream.write_all(&reply(&path)).await;
            }
        });
        (address, seen)
    }

    fn loopback(limits: SourceLimits) -> Policy {
        Policy {
            extra_schemes: BTreeSet::from(["http".to_owned()]),
            allow_private_addresses: true,
            limits,
            ..Policy::default()
        }
    }

    async fn get(
        policy: Policy,
        url: &str,
        credentials: Option<&Credentials>,
    ) -> Result<Snapshot, FetchError> {
        let policy = Arc::new(policy);
        let client = client(policy.clone(), None).unwrap_or_else(|e| panic!("client: {e}"));
        fetch(&client, &policy, url, credentials, None).await
    }

    const ROUTES: &[(&str, u16, &str)] = &[
        ("/app.env", 200, "A=1\n"),
        ("/secret", 401, "who are you"),
        ("/big", 200, "0123456789abcdef0123456789abcdef"),
    ];

    #[tokio::test]
    async fn a_file_becomes_a_one_file_snapshot_named_after_its_path() {
        let (address, _) = serve(ROUTES).await;
        let snapshot = get(
            loopback(SourceLimits::default()),
            &format!("http://{address}/app.env"),
            None,
        )
        .await;
        let Ok(snapshot) = snapshot else {
            panic!("{snapshot:?}");
        };
        assert!(snapshot.single_file && snapshot.made_at.is_none());
        assert_eq!(
            snapshot.files.get("app.env"),
            Some(&Content::Text("A=1\n".to_owned()))
        );
        assert_eq!(
            snapshot.revision,
            format!("sha256:{}", metahooks_hash::sha256_hex(b"A=1\n"))
        );
    }

    #[tokio::test]
    async fn status_codes_and_sizes_are_checked() {
        let (address, _) = serve(ROUTES).await;
        let policy = || {
            loopback(SourceLimits {
                config_bytes: 16,
                ..SourceLimits::default()
            })
        };
        let missing = get(policy(), &format!("http://{address}/gone"), None).await;
        assert!(
            matches!(missing, Err(FetchError::HttpStatus { status: 404, .. })),
            "{missing:?}"
        );
        let denied = get(policy(), &format!("http://{address}/secret"), None).await;
        assert!(
            matches!(denied, Err(FetchError::AuthFailed { .. })),
            "{denied:?}"
        );
        let big = get(policy(), &format!("http://{address}/big"), None).await;
        assert!(
            matches!(big, Err(FetchError::TooLarge { limit: 16, .. })),
            "{big:?}"
        );
    }

    #[tokio::test]
    async fn credentials_are_sent_and_never_shown() {
        let (address, seen) = serve(ROUTES).await;
        let token = Credentials {
            token: Some("t0k3n".to_owned()),
            binding: crate::binding::Binding::read("t", None, Some(&format!("http://{address}/"))),
            ..Credentials::default()
        };
        let fetched = get(
            loopback(SourceLimits::default()),
            &format!("http://{address}/app.env"),
            Some(&token),
        )
        .await;
        assert!(fetched.is_ok(), "{fetched:?}");
        let heads = seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        assert!(
            heads.iter().any(|h| h
                .to_ascii_lowercase()
                .contains("authorization: bearer t0k3n")),
            "{heads:?}"
        );
        // User-info written into a URL never appears in an error.
        let failed = get(
            loopback(SourceLimits::default()),
            &format!("http://user:hunter2@{address}/gone"),
            None,
        )
        .await;
        let message = failed.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            message.contains("404") && !message.contains("hunter2"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn private_addresses_and_other_schemes_are_refused_by_default() {
        let (address, seen) = serve(ROUTES).await;
        let default = Policy {
            extra_schemes: BTreeSet::from(["http".to_owned()]),
            ..Policy::default()
        };
        let private = get(default, &format!("http://{address}/app.env"), None).await;
        assert!(
            matches!(private, Err(FetchError::HostRefused { .. })),
            "{private:?}"
        );
        let git = get(
            loopback(SourceLimits::default()),
            &format!("git://{address}/repo"),
            None,
        )
        .await;
        assert!(
            matches!(git, Err(FetchError::SchemeRefused { .. })),
            "{git:?}"
        );
        assert!(
            seen.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_empty(),
            "nothing was sent"
        );
    }

    /// A loopback origin that answers every request with `head` and `body` as they are.
    async fn serve_raw(head: String, body: Vec<u8>) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
        let mut reply = head.into_bytes();
        reply.extend_from_slice(&body);
        serve_replies(move |_| reply.clone()).await
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("gzip: {e}"));
        encoder.finish().unwrap_or_else(|e| panic!("gzip: {e}"))
    }

    #[tokio::test]
    async fn a_compressed_file_is_read_decompressed_and_bounded_after_decompression() {
        let text = "KEY=value\n".repeat(1000);
        let body = gzip(text.as_bytes());
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        let (address, seen) = serve_raw(head, body).await;
        let url = format!("http://{address}/app.env");
        let snapshot = get(loopback(SourceLimits::default()), &url, None).await;
        let Ok(snapshot) = snapshot else {
            panic!("{snapshot:?}");
        };
        assert_eq!(snapshot.files.get("app.env"), Some(&Content::Text(text)));
        let asked = seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .concat()
            .to_ascii_lowercase();
        assert!(asked.contains("accept-encoding: gzip"), "{asked}");

        let bomb = gzip(&vec![b'x'; 4 * 1024 * 1024]);
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            bomb.len()
        );
        let (address, _) = serve_raw(head, bomb).await;
        let limits = SourceLimits {
            config_bytes: 64 * 1024,
            ..SourceLimits::default()
        };
        let big = get(loopback(limits), &format!("http://{address}/app.env"), None).await;
        assert!(
            matches!(big, Err(FetchError::TooLarge { limit: 65536, .. })),
            "{big:?}"
        );
    }

    /// A loopback origin that answers every request with `head` and then `piece` again
    /// and again until the client goes; the bytes it managed to send.
    async fn serve_endless(head: Vec<u8>, piece: Vec<u8>) -> (SocketAddr, Arc<AtomicU64>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let address = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("address: {e}"));
        let sent = Arc::new(AtomicU64::new(0));
        let counted = sent.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (head, piece, counted) = (head.clone(), piece.clone(), counted.clone());
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = stream.read(&mut request).await;
                    if stream.write_all(&head).await.is_err() {
                        return;
                    }
                    while stream.write_all(&piece).await.is_ok() {
                        counted.fetch_add(piece.len() as u64, Ordering::SeqCst);
                    }
                });
            }
        });
        (address, sent)
    }

    /// Limits for the endless origins: a small download cap, a deadline far beyond
    /// what a cut needs (so a cut is never mistaken for the deadline).
    fn endless_limits() -> SourceLimits {
        SourceLimits {
            download_bytes: 4 * 1024 * 1024,
            timeout_seconds: 120,
            ..SourceLimits::default()
        }
    }

    /// What sending without end costs: the error, and the bytes the origin got out.
    async fn endless(head: &[u8], piece: Vec<u8>) -> (Result<Snapshot, FetchError>, u64) {
        let (address, sent) = serve_endless(head.to_vec(), piece).await;
        let fetched = get(
            loopback(endless_limits()),
            &format!("http://{address}/app.env"),
            None,
        )
        .await;
        (fetched, sent.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn endless_informational_heads_are_cut_long_before_the_download_cap() {
        let (fetched, sent) = endless(
            b"",
            b"HTTP/1.1 100 Continue\r\nx-filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n".to_vec(),
        )
        .await;
        assert!(
            matches!(&fetched, Err(FetchError::TooLarge { limit, what })
                if *limit == client::HEAD_BYTES && what.contains("answer heads")),
            "{fetched:?}"
        );
        // What the origin got out is the cut and what the sockets' buffers held.
        assert!(
            sent < client::HEAD_BYTES + 32 * 1024 * 1024,
            "{sent} bytes sent"
        );
    }

    #[tokio::test]
    async fn an_endless_body_is_cut_at_the_download_cap() {
        let limits = SourceLimits {
            // The file limit above the download cap, so that the cap is what cuts.
            config_bytes: 64 * 1024 * 1024,
            ..endless_limits()
        };
        let (address, sent) = serve_endless(
            b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_vec(),
            vec![b'A'; 64 * 1024],
        )
        .await;
        let fetched = get(loopback(limits), &format!("http://{address}/app.env"), None).await;
        assert!(
            matches!(&fetched, Err(FetchError::TooLarge { limit, .. }) if *limit == 4 * 1024 * 1024),
            "{fetched:?}"
        );
        let sent = sent.load(Ordering::SeqCst);
        assert!(
            sent < 4 * 1024 * 1024 + 32 * 1024 * 1024,
            "{sent} bytes sent"
        );
    }

    #[tokio::test]
    async fn a_body_that_never_decodes_to_anything_is_cut_off() {
        // Endless empty stored deflate blocks after a zlib header.
        let head =
            "HTTP/1.1 200 OK\r\ncontent-encoding: deflate\r\ntransfer-encoding: chunked\r\n\r\n";
        let first = b"2\r\n\x78\x01\r\n".to_vec();
        let blocks = [0x00u8, 0x00, 0x00, 0xff, 0xff].repeat(8 * 1024);
        let mut chunk = format!("{:x}\r\n", blocks.len()).into_bytes();
        chunk.extend_from_slice(&blocks);
        chunk.extend_from_slice(b"\r\n");
        let mut opening = head.as_bytes().to_vec();
        opening.extend_from_slice(&first);
        let (address, _) = serve_endless(opening, chunk).await;
        let fetched = get(
            loopback(endless_limits()),
            &format!("http://{address}/app.env"),
            None,
        )
        .await;
        let message = fetched
            .as_ref()
            .err()
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(
            matches!(fetched, Err(FetchError::Unreachable { .. }))
                && message.contains("decodes to nothing"),
            "{fetched:?}"
        );
        // A gzip header whose file name never ends: cut by the decoder or the cap.
        let (fetched, _) = endless(
            b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\n\r\n\x1f\x8b\x08\x08\x00\x00\x00\x00\x00\xff",
            vec![b'a'; 64 * 1024],
        )
        .await;
        assert!(
            matches!(
                fetched,
                Err(FetchError::TooLarge { .. } | FetchError::Unreachable { .. })
            ),
            "{fetched:?}"
        );
    }

    #[tokio::test]
    async fn codings_are_read_by_name_in_any_case_and_others_refused() {
        let text = "KEY=value\n";
        for coding in ["x-gzip", "GZIP"] {
            let body = gzip(text.as_bytes());
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-encoding: {coding}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let (address, _) = serve_raw(head, body).await;
            let fetched = get(
                loopback(SourceLimits::default()),
                &format!("http://{address}/app.env"),
                None,
            )
            .await;
            let Ok(snapshot) = fetched else {
                panic!("{coding}: {fetched:?}");
            };
            assert_eq!(
                snapshot.files.get("app.env"),
                Some(&Content::Text(text.to_owned()))
            );
        }
        for coding in ["br", "zstd", "gzip, gzip"] {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-encoding: {coding}\r\ncontent-length: 4\r\nconnection: close\r\n\r\n"
            );
            let (address, _) = serve_raw(head, b"A=1\n".to_vec()).await;
            let fetched = get(
                loopback(SourceLimits::default()),
                &format!("http://{address}/app.env"),
                None,
            )
            .await;
            assert!(
                matches!(&fetched, Err(error @ FetchError::UnsupportedEncoding { coding: named, .. })
                    if named == coding && error.reason() == "UnsupportedEncoding"),
                "{coding}: {fetched:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_proxy_given_by_a_private_address_is_refused_without_a_connection() {
        let (address, seen) = serve(ROUTES).await;
        let proxy = crate::proxy::ProxyUrl {
            host: address.ip().to_string(),
            port: address.port(),
            credentials: None,
        };
        let policy = Policy {
            extra_schemes: BTreeSet::from(["http".to_owned()]),
            proxies: crate::proxy::Proxies {
                http: Some(proxy.clone()),
                https: Some(proxy),
                no_proxy: Vec::new(),
            },
            ..Policy::default()
        };
        for url in ["http://example.com/app.env", "https://example.com/app.env"] {
            let fetched = get(policy.clone(), url, None).await;
            assert!(
                matches!(&fetched, Err(FetchError::HostRefused { host, .. }) if *host == address.ip().to_string()),
                "{url}: {fetched:?}"
            );
        }
        assert!(
            seen.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_empty(),
            "nothing reached the proxy"
        );
    }

    /// What a GET of `url` by the engine's client fails with.
    async fn send_error(url: &str) -> SendError {
        let policy = Arc::new(loopback(SourceLimits::default()));
        let http = client(policy, None).unwrap_or_else(|e| panic!("client: {e}"));
        let meter = Meter::new(url, u64::MAX, Duration::from_secs(60));
        let url = url::Url::parse(url).unwrap_or_else(|e| panic!("{e}"));
        match send(&http.metered(&meter), &url, None).await {
            Ok(Err(error)) => error,
            other => panic!("an answer, or no request: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_connection_closed_under_the_request_is_told_apart_by_type() {
        // Closed without a word, as a server refusing a client certificate does.
        let (address, _) = serve_replies(|_| Vec::new()).await;
        let closed = send_error(&format!("http://{address}/app.env")).await;
        assert!(closed.closed_after_connecting(), "{closed:?}");
        // Nothing listening: the connection was never made.
        let refused = send_error("http://127.0.0.1:1/app.env").await;
        assert!(!refused.closed_after_connecting(), "{refused:?}");
    }
}
