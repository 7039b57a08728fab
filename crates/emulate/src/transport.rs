//! How the emulator reaches the hooks: servers in this process (anything implementing
//! [`InProcess`], one per simulated replica), or running servers over HTTP (any
//! language), one base URL per replica.

use std::future::Future;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::tls::HookTls;

/// A hook server called in this process instead of over HTTP: a test's axum `Router`,
/// or a server's own dispatch. It sees exactly the request bodies Metacontroller sends.
pub trait InProcess: Send + Sync {
    /// Answers a POST of `body` to `path` (the path part of the registration's URL) at
    /// simulated time `now`, with the HTTP status and body it would have sent.
    ///
    /// # Errors
    /// Why no answer came (an unknown path, the server failing to answer at all).
    fn post<'a>(
        &'a self,
        path: &'a str,
        body: Vec<u8>,
        now: jiff::Timestamp,
    ) -> BoxFuture<'a, Result<(u16, Vec<u8>), String>>;

    /// Resolves once background work the server started (fetches, say) is done, so the
    /// next round sees what it brought. The default has nothing to wait for.
    fn settle(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// An [`InProcess`] server made of a function from (path, body) to (status, body), for
/// hooks that need no simulated clock; see [`Transport::in_process`].
struct Function<F>(F);

impl<F, Fut> InProcess for Function<F>
where
    F: Fn(String, Vec<u8>) -> Fut + Send + Sync,
    Fut: Future<Output = (u16, Vec<u8>)> + Send + 'static,
{
    fn post<'a>(
        &'a self,
        path: &'a str,
        body: Vec<u8>,
        _now: jiff::Timestamp,
    ) -> BoxFuture<'a, Result<(u16, Vec<u8>), String>> {
        let answer = (self.0)(path.to_owned(), body);
        Box::pin(async move { Ok(answer.await) })
    }
}

/// How hooks are reached.
pub enum Transport {
    /// Replicas served in this process, called in turn.
    InProcess(Vec<Box<dyn InProcess>>),
    /// Hook servers over HTTP, called in turn.
    Http {
        /// The client calls go through.
        client: reqwest::Client,
        /// Base URLs, one per replica.
        bases: Vec<String>,
        /// Clients for webhooks with TLS settings of their own (`caBundle`,
        /// `clientTLS`), built once per setting.
        tls_clients: std::sync::Mutex<std::collections::HashMap<HookTls, reqwest::Client>>,
    },
}

/// What a hook answered, as Metacontroller would see it.
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body as answered.
    pub body: Vec<u8>,
    /// How long the answer took.
    pub elapsed: Duration,
    /// The Retry-After header, if any (read for 429 answers).
    pub retry_after: Option<String>,
    /// The ETag header, if any (kept where the webhook enables `etag`).
    pub etag: Option<String>,
}

/// The headers of an answer the emulator reads.
struct Headers {
    retry_after: Option<String>,
    etag: Option<String>,
}

impl Transport {
    /// One replica in this process: `hooks` gets each call's path and body and answers
    /// a status and a body (an axum `Router` through `tower::ServiceExt::oneshot`, say).
    pub fn in_process<F, Fut>(hooks: F) -> Transport
    where
        F: Fn(String, Vec<u8>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = (u16, Vec<u8>)> + Send + 'static,
    {
        Transport::InProcess(vec![Box::new(Function(hooks))])
    }

    /// Over HTTP to these base URLs (`http://host:port`, any path prefix kept), called
    /// round-robin.
    pub fn http(bases: Vec<String>) -> Transport {
        Transport::Http {
            client: reqwest::Client::new(),
            bases: trimmed(bases),
            tls_clients: std::sync::Mutex::default(),
        }
    }

    /// As [`Transport::http`], trusting the CA certificates in `ca_pem` for https hooks
    /// as well as the built-in roots.
    ///
    /// # Errors
    /// The PEM holds no certificate, or the client cannot be built.
    pub fn https_with_ca(bases: Vec<String>, ca_pem: &[u8]) -> Result<Transport, String> {
        let client = crate::tls::client(Some(ca_pem), true, None)
            .map_err(|e| e.replace("the CA bundle", "the CA file"))?;
        Ok(Transport::Http {
            client,
            bases: trimmed(bases),
            tls_clients: std::sync::Mutex::default(),
        })
    }

    /// How many replicas are called in turn.
    pub fn replicas(&self) -> usize {
        match self {
            Transport::InProcess(replicas) => replicas.len(),
            Transport::Http { bases, .. } => bases.len(),
        }
        .max(1)
    }

    /// POSTs `body` to the hook at `path` (the path part of the registration's URL) on
    /// replica `replica`, at simulated time `now`, with `If-None-Match` and
    /// `Authorization` when given (over HTTP only: an in-process server is always asked in
    /// full, and takes every caller).
    ///
    /// # Errors
    /// The reason no answer came (connection refused, timeout, unknown local hook).
    pub async fn post(
        &self,
        replica: usize,
        path: &str,
        body: Vec<u8>,
        now: jiff::Timestamp,
        timeout: Duration,
        headers: CallHeaders<'_>,
    ) -> Result<Answer, String> {
        let started = Instant::now();
        match self {
            Transport::InProcess(replicas) => {
                let server = replicas
                    .get(replica % replicas.len().max(1))
                    .ok_or("no in-process replica to call")?;
                let (status, body) = server.post(path, body, now).await?;
                Ok(Answer {
                    status,
                    body,
                    elapsed: started.elapsed(),
                    retry_after: None,
                    etag: None,
                })
            }
            Transport::Http {
                client,
                bases,
                tls_clients,
            } => {
                let base = bases
                    .get(replica % bases.len().max(1))
                    .ok_or("no hook URL to call")?;
                let client = match headers.tls {
                    None => client.clone(),
                    Some(tls) => client_for(tls_clients, tls)?,
                };
                post_http(&client, base, path, body, timeout, headers).await
            }
        }
    }

    /// Waits until every in-process server has finished the background work it started,
    /// so the next round sees what it brought (nothing to wait for over HTTP).
    pub async fn settle_sources(&self) {
        if let Transport::InProcess(replicas) = self {
            for replica in replicas {
                replica.settle().await;
            }
        }
    }
}

/// The request headers a call carries besides the JSON body's.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallHeaders<'a> {
    /// `If-None-Match`: the ETag kept for this object, if any.
    pub if_none_match: Option<&'a str>,
    /// `Authorization`: from the webhook's credentials, if it has some.
    pub authorization: Option<&'a str>,
    /// The webhook's own TLS settings, if it has some.
    pub tls: Option<&'a HookTls>,
}

/// The client for a webhook's TLS settings, built the first time they are met.
fn client_for(
    clients: &std::sync::Mutex<std::collections::HashMap<HookTls, reqwest::Client>>,
    tls: &HookTls,
) -> Result<reqwest::Client, String> {
    let mut clients = clients
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(client) = clients.get(tls) {
        return Ok(client.clone());
    }
    let client = crate::tls::client(tls.ca_pem.as_deref(), false, tls.client.as_ref())?;
    clients.insert(tls.clone(), client.clone());
    Ok(client)
}

/// One call over HTTP on its own task, as each of Metacontroller's workers is its own
/// goroutine: the time measured is the exchange's, not how soon the task driving the
/// round got back to it.
async fn post_http(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    body: Vec<u8>,
    timeout: Duration,
    headers: CallHeaders<'_>,
) -> Result<Answer, String> {
    let url = format!("{base}{path}");
    let client = client.clone();
    let if_none_match = headers.if_none_match.map(str::to_owned);
    let authorization = headers.authorization.map(str::to_owned);
    let call = tokio::spawn(async move {
        let started = Instant::now();
        // Metacontroller's client gives up at the webhook timeout, headers and body
        // together.
        let posted = tokio::time::timeout(
            timeout,
            post_json(&client, &url, body, if_none_match, authorization),
        )
        .await;
        let elapsed = started.elapsed();
        match posted {
            Ok(answered) => answered.map(|answer| (answer, elapsed)),
            Err(_) => Err(format!(
                "{url} did not answer within the webhook timeout of {timeout:?} (Metacontroller gives up and retries)"
            )),
        }
    });
    let ((status, body, headers), elapsed) = call
        .await
        .map_err(|e| format!("the call to {base}{path} failed in the emulator: {e}"))??;
    Ok(Answer {
        status,
        body,
        elapsed,
        retry_after: headers.retry_after,
        etag: headers.etag,
    })
}

/// POSTs `body` as JSON: the status, the body and the headers read.
async fn post_json(
    client: &reqwest::Client,
    url: &str,
    body: Vec<u8>,
    if_none_match: Option<String>,
    authorization: Option<String>,
) -> Result<(u16, Vec<u8>, Headers), String> {
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .body(body);
    if let Some(etag) = if_none_match {
        request = request.header("if-none-match", etag);
    }
    if let Some(authorization) = authorization {
        request = request.header("authorization", authorization);
    }
    let reply = request.send().await.map_err(|e| why_no_answer(url, &e))?;
    let status = reply.status().as_u16();
    let header = |name: &str| {
        reply
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let headers = Headers {
        retry_after: header("retry-after"),
        etag: header("etag"),
    };
    let body = reply
        .bytes()
        .await
        .map_err(|e| format!("cannot read the answer of {url}: {e}"))?;
    Ok((status, body.to_vec(), headers))
}

/// Why a call got no answer, told apart as a hook author needs it: nothing listening
/// (the server is not running, or the URL is wrong) or a hook that took the call and
/// closed the connection without answering (it crashed).
fn why_no_answer(url: &str, error: &reqwest::Error) -> String {
    use std::error::Error;
    if error.is_connect() {
        let mut source = error.source();
        let mut cause = error.to_string();
        while let Some(inner) = source {
            cause = inner.to_string();
            source = inner.source();
        }
        if cause.contains("certificate") {
            return format!(
                "the TLS handshake with {url} failed ({cause}): check the webhook's caBundle (or --hooks-ca-file) and clientTLS"
            );
        }
        return format!("cannot reach {url} ({cause}): is the hook server running there?");
    }
    if error.is_timeout() {
        return format!("{url} did not answer in time: {error}");
    }
    format!(
        "the hook at {url} took the call and closed the connection without an answer (did it crash?): {error}"
    )
}

fn trimmed(bases: Vec<String>) -> Vec<String> {
    bases
        .into_iter()
        .map(|base| base.trim_end_matches('/').to_owned())
        .collect()
}
