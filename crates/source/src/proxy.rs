//! Egress proxies for sources, read as the ecosystem reads them: `HTTPS_PROXY` for https
//! destinations, `HTTP_PROXY` for http ones, `NO_PROXY` for the hosts that go direct
//! (upper or lower case, the lower-case form winning as curl and Go have it), or one
//! `--source-proxy` for both. git:// and ssh:// never use a proxy.
//!
//! With a proxy the server connects only to the proxy, whose address passes the address
//! policy like any other; the destination is named to the proxy (CONNECT for https,
//! absolute-form requests for http), so its host name is not resolved here: an IP
//! literal destination is still checked against the policy. Proxy credentials come from
//! the proxy URL or `--source-proxy-credentials-file`, never from a CR.

use std::net::IpAddr;

/// One proxy: where it listens, and the credentials it wants.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProxyUrl {
    /// Host name or address of the proxy.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// `user:password` for `Proxy-Authorization: Basic`.
    pub credentials: Option<String>,
}

/// Why a proxy URL cannot be used (shown without its credentials).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // each variant is described by its #[error] message
pub enum ProxyError {
    #[error("the proxy {shown:?} is not a URL: {problem}")]
    NotUrl { shown: String, problem: String },
    #[error(
        "the proxy {shown:?} must be an http:// URL (the connection to the proxy itself is plain; https destinations are tunnelled with CONNECT)"
    )]
    NotHttp { shown: String },
    #[error("the proxy {shown:?} has no host")]
    NoHost { shown: String },
    #[error("the proxy {shown:?} has a path; give host and port only")]
    HasPath { shown: String },
}

impl ProxyUrl {
    /// Parses `http://[user:password@]host[:port]` (port 80 when left out).
    ///
    /// # Errors
    /// Not a URL, another scheme than http, no host, or a path.
    pub fn parse(raw: &str) -> Result<ProxyUrl, ProxyError> {
        let with_scheme = if raw.contains("://") {
            raw.to_owned()
        } else {
            format!("http://{raw}")
        };
        let shown = super::redact_url(raw);
        let url = url::Url::parse(&with_scheme).map_err(|e| ProxyError::NotUrl {
            shown: shown.clone(),
            problem: e.to_string(),
        })?;
        if url.scheme() != "http" {
            return Err(ProxyError::NotHttp { shown });
        }
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| ProxyError::NoHost {
                shown: shown.clone(),
            })?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if !matches!(url.path(), "" | "/") {
            return Err(ProxyError::HasPath { shown });
        }
        let credentials = (!url.username().is_empty()).then(|| {
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            format!(
                "{}:{}",
                decode(url.username()),
                decode(url.password().unwrap_or(""))
            )
        });
        Ok(ProxyUrl {
            host,
            port: url.port().unwrap_or(80),
            credentials,
        })
    }

    /// The proxy as logs and messages show it (no credentials).
    pub fn shown(&self) -> String {
        if self.host.contains(':') {
            format!("http://[{}]:{}", self.host, self.port)
        } else {
            format!("http://{}:{}", self.host, self.port)
        }
    }
}

/// The proxies sources use, by destination scheme, and the hosts that go direct.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Proxies {
    /// For http:// destinations.
    pub http: Option<ProxyUrl>,
    /// For https:// destinations.
    pub https: Option<ProxyUrl>,
    /// `NO_PROXY` entries, lower-case: `*`, a host and its subdomains (`example.com`), only
    /// subdomains (`.example.com`), an address, or a CIDR range.
    pub no_proxy: Vec<String>,
}

impl Proxies {
    /// From `--source-proxy` (both schemes) when set, else from the environment `env`
    /// reads; proxy credentials from `credentials` (`user:password`) when given.
    ///
    /// # Errors
    /// A proxy URL that does not parse.
    pub fn configure(
        flag: Option<&str>,
        credentials: Option<String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Proxies, ProxyError> {
        let var = |name: &str| {
            env(&name.to_ascii_lowercase())
                .or_else(|| env(name))
                .filter(|v| !v.trim().is_empty())
        };
        let parse = |raw: Option<String>| -> Result<Option<ProxyUrl>, ProxyError> {
            let Some(raw) = raw else { return Ok(None) };
            let mut proxy = ProxyUrl::parse(raw.trim())?;
            if let Some(credentials) = &credentials {
                proxy.credentials = Some(credentials.clone());
            }
            Ok(Some(proxy))
        };
        let (http, https) = match flag.filter(|f| !f.trim().is_empty()) {
            Some(flag) => {
                let proxy = parse(Some(flag.to_owned()))?;
                (proxy.clone(), proxy)
            }
            None => (parse(var("HTTP_PROXY"))?, parse(var("HTTPS_PROXY"))?),
        };
        let no_proxy = var("NO_PROXY")
            .unwrap_or_default()
            .split(',')
            .map(|entry| entry.trim().to_ascii_lowercase())
            .filter(|entry| !entry.is_empty())
            .collect();
        Ok(Proxies {
            http,
            https,
            no_proxy,
        })
    }

    /// The proxy a connection to `host` for a `scheme` destination goes through, if any.
    pub fn for_destination(&self, scheme: &str, host: &str) -> Option<&ProxyUrl> {
        let proxy = match scheme {
            "https" => self.https.as_ref(),
            "http" => self.http.as_ref(),
            _ => None,
        }?;
        (!self.bypassed(host)).then_some(proxy)
    }

    /// Whether `NO_PROXY` sends `host` direct, as Go's `httpproxy` reads it (what the
    /// cluster's other tools do). hyper-util's `NoProxy` (which reqwest uses) is not
    /// used: it reads a `host:port` entry as a name that never matches, lets `.svc`
    /// match `svc` itself where Go matches subdomains only, and does not ignore a
    /// fully-qualified name's trailing dot; the tests below pin all three.
    fn bypassed(&self, host: &str) -> bool {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let address = host.parse::<IpAddr>().ok();
        self.no_proxy.iter().any(|entry| {
            if entry == "*" {
                return true;
            }
            if let Some(address) = address {
                return entry
                    .parse::<ipnet::IpNet>()
                    .map(|net| net.contains(&address))
                    .or_else(|_| entry.parse::<IpAddr>().map(|ip| ip == address))
                    .unwrap_or(false);
            }
            // host[:port]: the port is not told apart (one proxy per scheme).
            let name = entry
                .rsplit_once(':')
                .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
                .map_or(entry.as_str(), |(name, _)| name)
                .trim_end_matches('.');
            match name.strip_prefix('.') {
                Some(parent) => host.ends_with(&format!(".{parent}")),
                None => host == name || host.ends_with(&format!(".{name}")),
            }
        })
    }

    /// Whether any proxy is set.
    pub fn any(&self) -> bool {
        self.http.is_some() || self.https.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn the_environment_is_read_as_curl_and_go_read_it() {
        let proxies = Proxies::configure(
            None,
            None,
            env(&[
                ("HTTPS_PROXY", "http://upper:3128"),
                ("https_proxy", "http://proxy.corp:3128"),
                ("HTTP_PROXY", "proxy.corp"),
                (
                    "NO_PROXY",
                    "internal.corp, .svc ,10.0.0.0/8,192.168.1.5,localhost:8080",
                ),
            ]),
        )
        .unwrap();
        let https = proxies.for_destination("https", "github.com").unwrap();
        assert_eq!(
            (https.host.as_str(), https.port),
            ("proxy.corp", 3128),
            "lower case wins"
        );
        assert_eq!(
            proxies.for_destination("http", "example.com").unwrap().port,
            80
        );
        assert!(proxies.for_destination("git", "github.com").is_none());
        assert!(proxies.for_destination("ssh", "github.com").is_none());
        for direct in [
            "internal.corp",
            "git.internal.corp",
            "a.svc",
            "10.1.2.3",
            "192.168.1.5",
            "localhost",
            "INTERNAL.CORP.",
        ] {
            assert!(
                proxies.for_destination("https", direct).is_none(),
                "{direct}"
            );
        }
        for proxied in ["svc", "notinternal.corp", "192.168.1.6", "11.0.0.1"] {
            assert!(
                proxies.for_destination("https", proxied).is_some(),
                "{proxied}"
            );
        }
        let everything = Proxies::configure(
            None,
            None,
            env(&[("HTTPS_PROXY", "p:1"), ("no_proxy", "*")]),
        )
        .unwrap();
        assert!(everything.for_destination("https", "github.com").is_none());
    }

    #[test]
    fn the_flag_overrides_the_environment_and_credentials_never_show() {
        let proxies = Proxies::configure(
            Some("http://user:p%40ss@egress:8080"),
            None,
            env(&[("HTTPS_PROXY", "http://other:1")]),
        )
        .unwrap();
        let proxy = proxies.for_destination("https", "github.com").unwrap();
        assert_eq!(proxy.host, "egress");
        assert_eq!(proxy.credentials.as_deref(), Some("user:p@ss"));
        assert_eq!(proxy.shown(), "http://egress:8080");
        let from_file = Proxies::configure(
            Some("egress:8080"),
            Some("u:from-file".to_owned()),
            env(&[]),
        )
        .unwrap();
        assert_eq!(
            from_file.https.unwrap().credentials.as_deref(),
            Some("u:from-file")
        );
        let kinds: Vec<ProxyError> = ["https://p:1", "socks5://p:1", "http://p:1/path", "http://"]
            .iter()
            .map(|bad| ProxyUrl::parse(bad).unwrap_err())
            .collect();
        assert!(
            matches!(
                kinds.as_slice(),
                [
                    ProxyError::NotHttp { .. },
                    ProxyError::NotHttp { .. },
                    ProxyError::HasPath { .. },
                    ProxyError::NotUrl { .. } | ProxyError::NoHost { .. }
                ]
            ),
            "{kinds:?}"
        );
        let error = ProxyUrl::parse("https://user:secret@p:1").unwrap_err();
        assert!(!error.to_string().contains("secret"), "{error}");
    }
}
