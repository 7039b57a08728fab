//! How the emulator reaches the hooks: our own controllers in this process (one
//! [`Registry`] per simulated replica, each with its own memos and source cache), or a
//! running server over HTTP (ours or anyone's), one base URL per replica.

use std::time::{Duration, Instant};

use crate::controllers::Registry;
use crate::protocol::Hook;
use crate::source::fetcher::Fetcher;

/// One replica served in this process.
pub struct LocalReplica {
    /// The replica's controllers.
    pub registry: Registry,
    /// The replica's source engine, if its controllers fetch anything.
    pub fetcher: Option<Fetcher>,
}

/// How hooks are reached.
pub enum Transport {
    /// Replicas served in this process, called in turn.
    Local(Vec<LocalReplica>),
    /// Hook servers over HTTP, called in turn.
    Http {
        /// The client calls go through.
        client: reqwest::Client,
        /// Base URLs, one per replica.
        bases: Vec<String>,
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
}

impl Transport {
    /// Over HTTP to these base URLs (`http://host:port`, any path prefix kept), called
    /// round-robin.
    pub fn http(bases: Vec<String>) -> Transport {
        Transport::Http {
            client: reqwest::Client::new(),
            bases: trimmed(bases),
        }
    }

    /// As [`Transport::http`], trusting the CA certificates in `ca_pem` for https hooks
    /// as well as the built-in roots.
    ///
    /// # Errors
    /// The PEM holds no certificate, or the client cannot be built.
    pub fn https_with_ca(bases: Vec<String>, ca_pem: &[u8]) -> Result<Transport, String> {
        let certificates = reqwest::Certificate::from_pem_bundle(ca_pem)
            .map_err(|e| format!("the CA file is not PEM certificates: {e}"))?;
        if certificates.is_empty() {
            return Err("the CA file holds no certificate".to_owned());
        }
        let mut builder = reqwest::Client::builder().use_rustls_tls();
        for certificate in certificates {
            builder = builder.add_root_certificate(certificate);
        }
        let client = builder
            .build()
            .map_err(|e| format!("cannot build the hook client: {e}"))?;
        Ok(Transport::Http {
            client,
            bases: trimmed(bases),
        })
    }

    /// How many replicas are called in turn.
    pub fn replicas(&self) -> usize {
        match self {
            Transport::Local(replicas) => replicas.len(),
            Transport::Http { bases, .. } => bases.len(),
        }
        .max(1)
    }

    /// POSTs `body` to the hook at `path` (the path part of the registration's URL) on
    /// replica `replica`, at simulated time `now`.
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
    ) -> Result<Answer, String> {
        let started = Instant::now();
        match self {
            Transport::Local(replicas) => {
                let local = replicas
                    .get(replica % replicas.len().max(1))
                    .ok_or("no in-process replica to call")?;
                let (controller, hook) = local_hook(path)?;
                let ctx = local.registry.context(now);
                let outcome = local.registry.call(controller, hook, &body, &ctx);
                let (status, body) = match outcome.result {
                    Ok(bytes) => (200, bytes),
                    Err(error) => (
                        error.status_code().as_u16(),
                        serde_json::json!({"error": error.to_string()})
                            .to_string()
                            .into_bytes(),
                    ),
                };
                Ok(Answer {
                    status,
                    body,
                    elapsed: started.elapsed(),
                    retry_after: None,
                })
            }
            Transport::Http { client, bases } => {
                let base = bases
                    .get(replica % bases.len().max(1))
                    .ok_or("no hook URL to call")?;
                let url = format!("{base}{path}");
                // Metacontroller's client gives up at the webhook timeout, headers and
                // body together.
                let call = async {
                    let reply = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await
                        .map_err(|e| format!("cannot call {url}: {e}"))?;
                    let status = reply.status().as_u16();
                    let retry_after = reply
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    let body = reply
                        .bytes()
                        .await
                        .map_err(|e| format!("cannot read the answer of {url}: {e}"))?;
                    Ok::<_, String>((status, body, retry_after))
                };
                let (status, body, retry_after) = tokio::time::timeout(timeout, call).await.map_err(|_| {
                    format!(
                        "{url} did not answer within the webhook timeout of {timeout:?} (Metacontroller gives up and retries)"
                    )
                })??;
                Ok(Answer {
                    status,
                    body: body.to_vec(),
                    elapsed: started.elapsed(),
                    retry_after,
                })
            }
        }
    }

    /// Waits until every in-process source engine has finished the fetches it started,
    /// so the next round sees what they brought (nothing to wait for over HTTP).
    pub async fn settle_sources(&self) {
        if let Transport::Local(replicas) = self {
            for fetcher in replicas.iter().filter_map(|r| r.fetcher.as_ref()) {
                fetcher.idle().await;
            }
        }
    }
}

fn trimmed(bases: Vec<String>) -> Vec<String> {
    bases
        .into_iter()
        .map(|base| base.trim_end_matches('/').to_owned())
        .collect()
}

/// `/apimock/sync` → ("apimock", Sync).
fn local_hook(path: &str) -> Result<(&str, Hook), String> {
    let trimmed = path.trim_matches('/');
    let (controller, hook) = trimmed
        .rsplit_once('/')
        .map(|(prefix, hook)| (prefix.rsplit('/').next().unwrap_or(prefix), hook))
        .ok_or_else(|| format!("hook path {path:?} is not /<controller>/<hook>"))?;
    let hook = Hook::from_segment(hook)
        .ok_or_else(|| format!("hook path {path:?} does not end in sync, finalize or customize"))?;
    Ok((controller, hook))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_paths_name_a_controller_and_a_hook() {
        assert_eq!(
            local_hook("/apimock/sync").ok(),
            Some(("apimock", Hook::Sync))
        );
        assert_eq!(
            local_hook("/prefix/configsync/finalize").ok(),
            Some(("configsync", Hook::Finalize))
        );
        assert!(local_hook("/apimock").is_err());
        assert!(local_hook("/apimock/other").is_err());
    }
}
