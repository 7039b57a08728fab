//! One file over HTTP(S), checked before and during the transfer: the client resolves
//! names through the address policy (so redirects and DNS answers are checked too),
//! follows at most a few redirects to allowed schemes, checks the status code (a 404
//! page is not a config — config-monitor rolled it out as an empty env) and stops
//! reading past the size limit.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::policy::Policy;
use super::tls::TlsMaterial;
use super::{Content, Credentials, FetchError, Snapshot};

/// Name resolution that drops (and so refuses) disallowed destination addresses.
struct PolicyResolver {
    policy: Arc<Policy>,
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut allowed = Vec::new();
            let mut last_refusal = None;
            for address in found {
                match policy.check_address(&host, address.ip()) {
                    Ok(()) => allowed.push(address),
                    Err(refusal) => last_refusal = Some(refusal),
                }
            }
            if allowed.is_empty() {
                let error: Box<dyn std::error::Error + Send + Sync> = match last_refusal {
                    Some(refusal) => Box::new(refusal),
                    None => format!("{host} has no addresses").into(),
                };
                return Err(error);
            }
            let addresses: Addrs = Box::new(allowed.into_iter());
            Ok(addresses)
        })
    }
}

/// Redirect hops one fetch follows.
const MAX_REDIRECTS: usize = 5;

/// A client that applies `policy` to every connection it makes. Redirects are followed
/// by [`fetch`] itself, one hop at a time, so each hop is checked against the policy and
/// against the credentials' binding before anything is sent to it.
pub fn client(
    policy: Arc<Policy>,
    tls: Option<&super::tls::TlsMaterial>,
) -> Result<reqwest::Client, FetchError> {
    let config = super::tls::client_config(policy.source_ca_pem.as_deref(), tls)?;
    let mut builder = reqwest::Client::builder()
        .use_preconfigured_tls(rustls::ClientConfig::clone(&config))
        .dns_resolver(Arc::new(PolicyResolver {
            policy: policy.clone(),
        }))
        .redirect(reqwest::redirect::Policy::none())
        // A connection per request: a proxy or server that closes after its answer
        // (tinyproxy does) races a reused connection, and git's POSTs are not retried.
        .pool_max_idle_per_host(0)
        // reqwest would read the environment's proxies itself; the engine's own (from
        // the same variables, or --source-proxy) are the ones used.
        .no_proxy();
    if policy.proxies.any() {
        builder = builder.proxy(egress(&policy.proxies));
    }
    builder
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(policy.limits.timeout_seconds))
        .user_agent(concat!("metahooks/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| FetchError::Other(format!("cannot build the HTTP client: {e}")))
}

/// The egress proxy for each destination (none for a `NO_PROXY` host). The proxy's own
/// name is resolved through [`PolicyResolver`], so its address is checked; the
/// destination's is the proxy's to resolve.
fn egress(proxies: &super::proxy::Proxies) -> reqwest::Proxy {
    let proxies = proxies.clone();
    let credentials = proxies
        .https
        .iter()
        .chain(proxies.http.iter())
        .find_map(|p| p.credentials.clone());
    let proxy = reqwest::Proxy::custom(move |url| {
        let proxy = proxies.for_destination(url.scheme(), url.host_str()?)?;
        url::Url::parse(&proxy.shown()).ok()
    });
    match credentials.as_deref().and_then(|c| c.split_once(':')) {
        Some((user, password)) => proxy.basic_auth(user, password),
        None => proxy,
    }
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
/// the body included.
///
/// # Errors
/// A refused URL or address, credentials their Secret does not allow for the URL, an
/// error status, a body over the size limit, or a transport failure; never with
/// user-info from the URL in the message.
pub async fn fetch(
    client: &reqwest::Client,
    policy: &Policy,
    url: &str,
    credentials: Option<&Credentials>,
    tls: Option<&TlsMaterial>,
) -> Result<Snapshot, FetchError> {
    let seconds = policy.limits.timeout_seconds;
    tokio::time::timeout(
        Duration::from_secs(seconds),
        fetch_unbounded(client, policy, url, credentials, tls),
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
    client: &reqwest::Client,
    policy: &Policy,
    raw_url: &str,
    credentials: Option<&Credentials>,
    tls: Option<&TlsMaterial>,
) -> Result<Snapshot, FetchError> {
    let (response, target, shown) =
        follow_redirects(client, policy, raw_url, credentials, tls).await?;
    let url = shown.as_str();
    let status = response.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
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
    let revision = format!("sha256:{}", crate::hash::sha256_hex(&body));
    let files = [(name, Content::from_bytes(body))].into();
    Ok(Snapshot::new(revision, files, true, None))
}

/// GETs `raw_url`, following at most [`MAX_REDIRECTS`] redirects, each checked against
/// the policy: the first answer that is not a redirect, the URL that gave it, and that
/// URL as people may see it (never with user-info).
async fn follow_redirects(
    client: &reqwest::Client,
    policy: &Policy,
    raw_url: &str,
    credentials: Option<&Credentials>,
    tls: Option<&TlsMaterial>,
) -> Result<(reqwest::Response, url::Url, String), FetchError> {
    let mut shown = super::redact_url(raw_url);
    let mut target = checked(policy, raw_url)?;
    if let Some(credentials) = credentials {
        credentials.check_url(target.as_str())?;
    }
    let mut hops = 0;
    loop {
        // Credentials go to a hop only when their Secret allows its URL.
        let hop_credentials = credentials.filter(|c| c.check_url(target.as_str()).is_ok());
        let response = match send(client, target.clone(), hop_credentials).await {
            Ok(response) => response,
            Err(error) => return Err(explained(error, &target, &shown, policy, tls).await),
        };
        if !response.status().is_redirection() {
            return Ok((response, target, shown));
        }
        hops += 1;
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
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

/// The body (decompressed), refused as soon as it passes the policy's size limit.
async fn read_bounded(
    response: reqwest::Response,
    url: &str,
    policy: &Policy,
) -> Result<Vec<u8>, FetchError> {
    use http_body_util::BodyExt;
    let limit = policy.limits.config_bytes.min(policy.limits.download_bytes);
    let body = reqwest::Body::from(response);
    let limited = http_body_util::Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX));
    match limited.collect().await {
        // Without a copy when the body came in one piece.
        Ok(collected) => Ok(Vec::from(collected.to_bytes())),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(FetchError::TooLarge {
            what: format!("the file at {url}"),
            limit,
        }),
        Err(error) => match error.downcast::<reqwest::Error>() {
            Ok(error) => Err(transport_error(*error, url, policy)),
            Err(error) => Err(FetchError::Unreachable {
                url: url.to_owned(),
                detail: error.to_string(),
            }),
        },
    }
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

async fn send(
    client: &reqwest::Client,
    url: url::Url,
    credentials: Option<&Credentials>,
) -> Result<reqwest::Response, reqwest::Error> {
    let mut request = client.get(url);
    if let Some(credentials) = credentials {
        request = match (
            &credentials.username,
            &credentials.password,
            &credentials.token,
        ) {
            (Some(user), Some(password), _) => request.basic_auth(user, Some(password)),
            (_, _, Some(token)) => request.bearer_auth(token),
            _ => request,
        };
    }
    request.send().await
}

/// A failed request as a [`FetchError`]. An https connection the server closed after the
/// handshake is how a server that wants a client certificate refuses one (TLS 1.3 sends
/// its alert after the handshake): the certificate probe then says why, in TLS's words.
pub(crate) async fn explained(
    error: reqwest::Error,
    target: &url::Url,
    shown: &str,
    policy: &Policy,
    tls: Option<&TlsMaterial>,
) -> FetchError {
    let closed = target.scheme() == "https" && closed_after_connecting(&error);
    // A connection that failed through an egress proxy failed at the proxy (down, or
    // refusing the tunnel or its credentials): say which proxy.
    let proxy = target
        .host_str()
        .filter(|_| error.is_connect())
        .and_then(|host| policy.proxies.for_destination(target.scheme(), host));
    let failure = transport_error(error, shown, policy);
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

/// Whether the connection was made and then closed under the request, read from the
/// error's types (hyper's, or the socket's), never from its message.
fn closed_after_connecting(error: &reqwest::Error) -> bool {
    if error.is_connect() || error.is_timeout() {
        return false;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(hyper) = current.downcast_ref::<hyper::Error>()
            && (hyper.is_canceled() || hyper.is_incomplete_message() || hyper.is_closed())
        {
            return true;
        }
        if let Some(io) = current.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::BrokenPipe
            )
        {
            return true;
        }
        source = current.source();
    }
    false
}

pub(crate) fn transport_error(error: reqwest::Error, url: &str, policy: &Policy) -> FetchError {
    // reqwest's message names the URL as requested, user-info included; ours is redacted.
    let error = error.without_url();
    if error.is_timeout() {
        return FetchError::Timeout {
            url: url.to_owned(),
            seconds: policy.limits.timeout_seconds,
        };
    }
    // A refusal from the resolver or the redirect policy travels as the source error.
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(current) = source {
        if let Some(refusal) = current.downcast_ref::<FetchError>() {
            return refusal.clone();
        }
        source = current.source();
    }
    if let Some(detail) = super::tls::certificate_problem(&error) {
        return FetchError::CertificateInvalid {
            url: url.to_owned(),
            detail,
        };
    }
    let mut detail = error.to_string();
    let mut inner = std::error::Error::source(&error);
    while let Some(cause) = inner {
        detail = format!("{detail}: {cause}");
        inner = cause.source();
    }
    FetchError::Unreachable {
        url: url.to_owned(),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Mutex;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::source::policy::SourceLimits;

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
            format!("sha256:{}", crate::hash::sha256_hex(b"A=1\n"))
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
            binding: crate::source::binding::Binding::read(
                "t",
                None,
                Some(&format!("http://{address}/")),
            ),
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

    #[tokio::test]
    async fn a_connection_closed_under_the_request_is_told_apart_by_type() {
        // Closed without a word, as a server refusing a client certificate does.
        let (address, _) = serve_replies(|_| Vec::new()).await;
        let client = reqwest::Client::new();
        let closed = client
            .get(format!("http://{address}/app.env"))
            .send()
            .await
            .err()
            .unwrap_or_else(|| panic!("an answer from a server that closed"));
        assert!(closed_after_connecting(&closed), "{closed:?}");
        // Nothing listening: the connection was never made.
        let refused = client
            .get("http://127.0.0.1:1/app.env")
            .send()
            .await
            .err()
            .unwrap_or_else(|| panic!("an answer from nowhere"));
        assert!(!closed_after_connecting(&refused), "{refused:?}");
    }
}
