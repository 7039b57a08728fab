//! Safety rules every fetch passes before touching the network: which schemes, which
//! destination addresses, how much data, which paths. Defaults are strict (https only,
//! public addresses only); tests and development loosen them with explicit flags.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::FetchError;

#[derive(Debug, Clone)]
pub struct Limits {
    /// Bytes a single download (pack or file) may transfer.
    pub download_bytes: u64,
    /// Files under a requested directory.
    pub files: usize,
    /// Total bytes of the configuration (a ConfigMap holds at most 1 MiB).
    pub config_bytes: u64,
    /// Seconds one fetch may take.
    pub timeout_seconds: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            download_bytes: 64 * 1024 * 1024,
            files: 256,
            config_bytes: 1024 * 1024 - 16 * 1024,
            timeout_seconds: 20,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Schemes besides https that may be fetched (`http`, `git`, `file`).
    pub extra_schemes: BTreeSet<String>,
    /// Loopback, private and link-local destinations (cloud metadata included).
    pub allow_private_addresses: bool,
    pub limits: Limits,
}

impl Policy {
    /// Parses and checks a URL's scheme; scp-style `user@host:path` is ssh and refused.
    pub fn check_url(&self, raw: &str) -> Result<url::Url, FetchError> {
        let parsed = url::Url::parse(raw).map_err(|e| {
            let looks_like_scp = raw.contains('@') && raw.contains(':') && !raw.contains("://");
            if looks_like_scp {
                FetchError::SchemeRefused {
                    scheme: "ssh".to_owned(),
                }
            } else {
                FetchError::InvalidUrl {
                    url: raw.to_owned(),
                    problem: e.to_string(),
                }
            }
        })?;
        let scheme = parsed.scheme();
        let allowed = scheme == "https"
            || (matches!(scheme, "http" | "git" | "file") && self.extra_schemes.contains(scheme));
        if !allowed {
            return Err(FetchError::SchemeRefused {
                scheme: scheme.to_owned(),
            });
        }
        if scheme != "file" && parsed.host_str().is_none_or(str::is_empty) {
            return Err(FetchError::InvalidUrl {
                url: raw.to_owned(),
                problem: "it has no host".to_owned(),
            });
        }
        Ok(parsed)
    }

    /// Refuses a destination address unless private addresses are allowed.
    pub fn check_address(&self, host: &str, address: IpAddr) -> Result<(), FetchError> {
        if self.allow_private_addresses {
            return Ok(());
        }
        match refusal(address) {
            Some(why) => Err(FetchError::HostRefused {
                host: host.to_owned(),
                why: format!("{address} is {why}"),
            }),
            None => Ok(()),
        }
    }

    /// Resolves a URL's host and checks every address it resolves to.
    pub fn check_host(&self, parsed: &url::Url) -> Result<(), FetchError> {
        if parsed.scheme() == "file" {
            return Ok(());
        }
        let host = parsed.host_str().unwrap_or_default();
        let port = parsed.port_or_known_default().unwrap_or(443);
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(address) = bare.parse::<IpAddr>() {
            return self.check_address(host, address);
        }
        if self.allow_private_addresses {
            return Ok(());
        }
        let addresses = std::net::ToSocketAddrs::to_socket_addrs(&(bare, port)).map_err(|e| {
            FetchError::Unreachable {
                url: parsed.to_string(),
                detail: format!("cannot resolve {host}: {e}"),
            }
        })?;
        for address in addresses {
            self.check_address(host, address.ip())?;
        }
        Ok(())
    }
}

/// Why an address is not a public destination, if it is not.
pub fn refusal(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if v4.is_loopback() {
                Some("a loopback address")
            } else if v4.is_link_local() {
                Some("a link-local address (cloud metadata lives here)")
            } else if v4.is_private() || (a == 100 && (64..128).contains(&b)) {
                Some("a private address")
            } else if v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast() {
                Some("not a unicast address")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return refusal(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some("a loopback address")
            } else if first & 0xffc0 == 0xfe80 {
                Some("a link-local address")
            } else if first & 0xfe00 == 0xfc00 {
                Some("a private (unique local) address")
            } else if v6.is_unspecified() || v6.is_multicast() {
                Some("not a unicast address")
            } else {
                None
            }
        }
    }
}

/// A path inside a repository: relative, without `..`, normalised to `a/b`.
pub fn check_repo_path(path: &str) -> Result<String, FetchError> {
    let refuse = |why: &str| {
        Err(FetchError::PathRefused {
            path: path.to_owned(),
            why: why.to_owned(),
        })
    };
    if path.starts_with('/') || path.contains('\\') {
        return refuse("it must be relative to the repository root, with '/' separators");
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return refuse("it may not climb out of the repository with '..'"),
            other => parts.push(other),
        }
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_by_default() {
        let policy = Policy::default();
        assert!(policy.check_url("https://example.com/repo.git").is_ok());
        for (url, scheme) in [
            ("http://example.com/x", "http"),
            ("git://example.com/x", "git"),
            ("file:///etc/passwd", "file"),
            ("ssh://git@example.com/x", "ssh"),
        ] {
            assert_eq!(
                policy.check_url(url).unwrap_err(),
                FetchError::SchemeRefused {
                    scheme: scheme.to_owned()
                }
            );
        }
        assert_eq!(
            policy
                .check_url("git@github.com:org/repo.git")
                .unwrap_err()
                .reason(),
            "SchemeRefused"
        );
        let loose = Policy {
            extra_schemes: ["git".to_owned()].into(),
            ..Policy::default()
        };
        assert!(loose.check_url("git://127.0.0.1/x").is_ok());
        assert!(loose.check_url("http://127.0.0.1/x").is_err());
    }

    #[test]
    fn private_and_metadata_addresses_are_refused() {
        let policy = Policy::default();
        for address in [
            "127.0.0.1",
            "169.254.169.254",
            "10.1.2.3",
            "192.168.0.1",
            "172.16.0.1",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
        ] {
            assert!(
                policy.check_address("h", address.parse().unwrap()).is_err(),
                "{address}"
            );
        }
        assert!(
            policy
                .check_address("h", "93.184.216.34".parse().unwrap())
                .is_ok()
        );
        let url = policy
            .check_url("https://169.254.169.254/latest/meta-data")
            .unwrap();
        assert_eq!(policy.check_host(&url).unwrap_err().reason(), "HostRefused");
        let allowed = Policy {
            allow_private_addresses: true,
            ..Policy::default()
        };
        assert!(allowed.check_host(&url).is_ok());
    }

    #[test]
    fn repository_paths_stay_inside() {
        assert_eq!(check_repo_path("config/app.env").unwrap(), "config/app.env");
        assert_eq!(check_repo_path("./config//").unwrap(), "config");
        assert_eq!(check_repo_path("").unwrap(), "");
        assert!(check_repo_path("../etc/passwd").is_err());
        assert!(check_repo_path("a/../../b").is_err());
        assert!(check_repo_path("/etc/passwd").is_err());
    }
}
