//! The HTTP client every http(s) source speaks through: HTTP file sources in the server,
//! git's smart HTTP in the fetch workers. It is hyper-util's client on a connector of
//! ours ([`connector`]) with hyper-rustls' TLS, so that what a remote costs is counted
//! where it arrives:
//! - every byte received (TLS records, heads, `1xx` answers, bodies before decoding)
//!   against the fetch's download cap, by its [`Meter`];
//! - the CPU time spent on the fetch's behalf (its own future and its connection's task)
//!   against its deadline ([`cpu`]);
//! - decoded bytes against the caller's own caps, with codings undone here ([`decode`])
//!   so that a decoder that makes no progress is cut off too.
//!
//! reqwest could not do this: its connector is sealed, so neither the bytes on the socket
//! nor the connection's task can be reached from outside.

mod connector;
mod cpu;
pub mod decode;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, PROXY_AUTHORIZATION, USER_AGENT};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy;

use super::FetchError;
use super::policy::Policy;
use super::tls::TlsMaterial;

/// The codings asked for: what [`decode`] reads.
const ACCEPTED_CODINGS: &str = "gzip, deflate";

/// Bytes that may arrive between sending a request and its final answer's head: `1xx`
/// answers and the head itself. hyper bounds one head (about 400 KiB) but not how many
/// `1xx` answers come before it, and parsing them costs the server's async threads, so
/// endless ones are cut here, long before the download cap.
pub const HEAD_BYTES: u64 = 1024 * 1024;

/// What one fetch may receive and spend, and what it has so far; shared by every
/// connection and task of the fetch.
pub struct Meter {
    shown: String,
    received: AtomicU64,
    cap: u64,
    /// While a request waits for its answer: the total at which the heads are too long
    /// (0: no answer awaited).
    heads_until: AtomicU64,
    cpu_nanos: AtomicU64,
    cpu_cap: Duration,
    refusal: Mutex<Option<FetchError>>,
}

impl Meter {
    /// A meter for a fetch of `shown` (its URL as people may see it) that may receive
    /// `cap` bytes and spend `cpu` of CPU time.
    pub fn new(shown: &str, cap: u64, cpu: Duration) -> Arc<Meter> {
        Arc::new(Meter {
            shown: shown.to_owned(),
            received: AtomicU64::new(0),
            cap,
            heads_until: AtomicU64::new(0),
            cpu_nanos: AtomicU64::new(0),
            cpu_cap: cpu,
            refusal: Mutex::new(None),
        })
    }

    /// Bytes received so far, on every connection of the fetch.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::SeqCst)
    }

    /// Counts `bytes` received.
    ///
    /// # Errors
    /// The total passes the cap (and stays refused from then on).
    fn count(&self, bytes: usize) -> Result<(), FetchError> {
        let bytes = bytes as u64;
        let total = self.received.fetch_add(bytes, Ordering::SeqCst) + bytes;
        // Heads first: when one read passes both, the heads are the nearer cause.
        let heads_until = self.heads_until.load(Ordering::SeqCst);
        if heads_until != 0 && total > heads_until {
            return Err(self.refuse(FetchError::TooLarge {
                what: format!("the answer heads from {}", self.shown),
                limit: HEAD_BYTES,
            }));
        }
        if total > self.cap {
            return Err(self.refuse(FetchError::TooLarge {
                what: format!("what {} sent", self.shown),
                limit: self.cap,
            }));
        }
        Ok(())
    }

    /// From now until [`Meter::answered`], at most [`HEAD_BYTES`] more may arrive.
    fn awaiting_answer(&self) {
        let until = self.received().saturating_add(HEAD_BYTES).max(1);
        self.heads_until.store(until, Ordering::SeqCst);
    }

    fn answered(&self) {
        self.heads_until.store(0, Ordering::SeqCst);
    }

    fn add_cpu(&self, spent: Duration) {
        let nanos = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
        self.cpu_nanos.fetch_add(nanos, Ordering::SeqCst);
    }

    /// Whether the fetch has spent its CPU time.
    fn cpu_spent(&self) -> bool {
        let spent = Duration::from_nanos(self.cpu_nanos.load(Ordering::SeqCst));
        if spent <= self.cpu_cap {
            return false;
        }
        self.refuse(FetchError::CpuLimit {
            url: self.shown.clone(),
            seconds: self.cpu_cap.as_secs().max(1),
        });
        true
    }

    /// Records `refusal` unless an earlier one is; the one recorded.
    fn refuse(&self, refusal: FetchError) -> FetchError {
        let mut first = self
            .refusal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        first.get_or_insert(refusal).clone()
    }

    /// Why the fetch was cut off, if it was.
    pub fn refusal(&self) -> Option<FetchError> {
        self.refusal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Runs `fetch` with its CPU time counted; the meter's refusal when it was cut off,
    /// whatever `fetch` made of the failure it saw.
    ///
    /// # Errors
    /// `fetch`'s error, or the meter's refusal.
    pub async fn run<T>(
        self: &Arc<Meter>,
        fetch: impl Future<Output = Result<T, FetchError>>,
    ) -> Result<T, FetchError> {
        let outcome = cpu::Metered::new(fetch, self.clone()).await;
        match (outcome, self.refusal()) {
            (Some(Ok(value)), _) => Ok(value),
            (_, Some(refusal)) => Err(refusal),
            (Some(Err(error)), None) => Err(error),
            (None, None) => Err(FetchError::CpuLimit {
                url: self.shown.clone(),
                seconds: self.cpu_cap.as_secs().max(1),
            }),
        }
    }
}

/// What every fetch's client shares: the policy, and TLS settings built once.
#[derive(Clone)]
pub struct HttpClient {
    policy: Arc<Policy>,
    tls: Arc<rustls::ClientConfig>,
    user_agent: http::HeaderValue,
}

impl HttpClient {
    /// A client under `policy`, trusting its CAs and `tls`'s, presenting `tls`'s client
    /// certificate, naming itself `user_agent`.
    ///
    /// # Errors
    /// The TLS material cannot be used.
    pub fn new(
        policy: Arc<Policy>,
        tls: Option<&TlsMaterial>,
        user_agent: &'static str,
    ) -> Result<HttpClient, FetchError> {
        let tls = super::tls::client_config(policy.source_ca_pem.as_deref(), tls)?;
        Ok(HttpClient {
            policy,
            tls,
            user_agent: http::HeaderValue::from_static(user_agent),
        })
    }

    /// A client for one fetch, its bytes and CPU time counted by `meter`. Each request
    /// gets a connection of its own: a proxy or server that closes after its answer
    /// (tinyproxy does) would race a reused one, and git's POSTs are not retried.
    pub fn metered(&self, meter: &Arc<Meter>) -> MeteredClient {
        let route = connector::Route::new(self.policy.clone(), meter.clone());
        // hyper-rustls offers the protocols it speaks by ALPN itself (and refuses a
        // configuration that names some already).
        let mut tls = rustls::ClientConfig::clone(&self.tls);
        tls.alpn_protocols.clear();
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(route);
        let client = legacy::Client::builder(cpu::MeteredExecutor {
            meter: meter.clone(),
        })
        .pool_max_idle_per_host(0)
        .build(https);
        MeteredClient {
            client,
            meter: meter.clone(),
            policy: self.policy.clone(),
            user_agent: self.user_agent.clone(),
        }
    }
}

/// One fetch's client (see [`HttpClient::metered`]).
pub struct MeteredClient {
    client: legacy::Client<hyper_rustls::HttpsConnector<connector::Route>, Full<Bytes>>,
    meter: Arc<Meter>,
    policy: Arc<Policy>,
    user_agent: http::HeaderValue,
}

/// A request that got no answer.
#[derive(Debug)]
pub struct SendError(legacy::Error);

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // hyper-util's own words are generic ("client error (Connect)"); the causes say
        // what happened.
        write!(f, "{}", self.0)?;
        let mut cause = std::error::Error::source(&self.0);
        while let Some(error) = cause {
            write!(f, ": {error}")?;
            cause = error.source();
        }
        Ok(())
    }
}

impl std::error::Error for SendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl SendError {
    /// Whether no connection was made (refused, unreachable, a proxy that would not
    /// tunnel).
    pub fn is_connect(&self) -> bool {
        self.0.is_connect()
    }

    /// Whether the connection was made and then closed under the request, read from the
    /// error's types (hyper's, or the socket's), never from its message.
    pub fn closed_after_connecting(&self) -> bool {
        if self.is_connect() {
            return false;
        }
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&self.0);
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
}

impl MeteredClient {
    /// Sends `request` with the client's agent, the codings it reads, and the proxy's
    /// credentials when it goes to a proxy as an absolute-form request.
    ///
    /// # Errors
    /// No answer came (the meter's refusal, if it cut the connection, is in the chain).
    pub async fn send(
        &self,
        mut request: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<Incoming>, SendError> {
        let headers = request.headers_mut();
        headers
            .entry(USER_AGENT)
            .or_insert_with(|| self.user_agent.clone());
        headers.insert(
            ACCEPT_ENCODING,
            http::HeaderValue::from_static(ACCEPTED_CODINGS),
        );
        let uri = request.uri();
        if uri.scheme_str() == Some("http")
            && let Some(proxy) = self
                .policy
                .proxies
                .for_destination("http", uri.host().unwrap_or_default())
            && let Some(authorization) = proxy.credentials.as_deref().and_then(connector::basic)
        {
            request
                .headers_mut()
                .insert(PROXY_AUTHORIZATION, authorization);
        }
        self.meter.awaiting_answer();
        let answer = self.client.request(request).await.map_err(SendError);
        self.meter.answered();
        answer
    }
}

/// A GET of `url` with `headers`.
///
/// # Errors
/// `url` is not a valid request target.
pub fn get(url: &url::Url) -> Result<http::request::Builder, FetchError> {
    request(http::Method::GET, url)
}

/// A request of `method` to `url`.
///
/// # Errors
/// `url` is not a valid request target.
pub fn request(method: http::Method, url: &url::Url) -> Result<http::request::Builder, FetchError> {
    let uri: http::Uri =
        url.as_str()
            .parse()
            .map_err(|e: http::uri::InvalidUri| FetchError::InvalidUrl {
                url: super::redact_url(url.as_str()),
                problem: e.to_string(),
            })?;
    Ok(http::Request::builder().method(method).uri(uri))
}

/// An answer's body, decoded as it arrives.
pub struct Body {
    incoming: Incoming,
    decoder: Option<decode::Decoder>,
}

impl Body {
    /// The body of `answer`, decoded by its `Content-Encoding`.
    ///
    /// # Errors
    /// A coding that is not read ([`FetchError::UnsupportedEncoding`]).
    pub fn of(answer: http::Response<Incoming>, shown: &str) -> Result<Body, FetchError> {
        let coding = answer
            .headers()
            .get_all(CONTENT_ENCODING)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect::<Vec<_>>()
            .join(", ");
        let decoder = decode::Decoder::for_coding(Some(&coding)).map_err(|e| match e {
            decode::CodingError::Unsupported(coding) => FetchError::UnsupportedEncoding {
                url: shown.to_owned(),
                coding,
            },
            other => FetchError::Unreachable {
                url: shown.to_owned(),
                detail: other.to_string(),
            },
        })?;
        Ok(Body {
            incoming: answer.into_body(),
            decoder: Some(decoder),
        })
    }

    /// The next decoded piece (possibly empty), or None at the end.
    ///
    /// # Errors
    /// The connection failed or was cut, or the data does not decode.
    pub async fn next(
        &mut self,
        shown: &str,
        policy: &Policy,
    ) -> Result<Option<Bytes>, FetchError> {
        let undecodable = |e: decode::CodingError| FetchError::Unreachable {
            url: shown.to_owned(),
            detail: e.to_string(),
        };
        loop {
            let Some(decoder) = self.decoder.as_mut() else {
                return Ok(None);
            };
            match self.incoming.frame().await {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    return decoder
                        .push(&data)
                        .map(|out| Some(Bytes::from(out)))
                        .map_err(undecodable);
                }
                Some(Err(error)) => return Err(failure(&error, shown, policy)),
                None => {
                    let rest = self
                        .decoder
                        .take()
                        .map(decode::Decoder::finish)
                        .transpose()
                        .map_err(undecodable)?
                        .unwrap_or_default();
                    return Ok((!rest.is_empty()).then(|| Bytes::from(rest)));
                }
            }
        }
    }
}

/// A failed exchange as a [`FetchError`]: a refusal of ours found in its causes (the
/// policy's, or the meter's), a certificate problem in TLS's words, else the causes.
pub fn failure(
    error: &(dyn std::error::Error + 'static),
    shown: &str,
    policy: &Policy,
) -> FetchError {
    if let Some(refusal) = connector::refusal_in(error) {
        return refusal;
    }
    if let Some(detail) = super::tls::certificate_problem(error) {
        return FetchError::CertificateInvalid {
            url: shown.to_owned(),
            detail,
        };
    }
    let timed_out = std::iter::successors(Some(error), |e| e.source()).any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
    });
    if timed_out {
        return FetchError::Timeout {
            url: shown.to_owned(),
            seconds: policy.limits.timeout_seconds,
        };
    }
    let mut detail = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let words = inner.to_string();
        if !detail.contains(&words) {
            detail = format!("{detail}: {words}");
        }
        cause = inner.source();
    }
    FetchError::Unreachable {
        url: shown.to_owned(),
        detail,
    }
}
