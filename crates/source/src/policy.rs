//! Safety rules every fetch passes before touching the network: which schemes, which
//! destination addresses, how much data, which paths. Defaults are strict (https only,
//! public addresses only); tests and development loosen them with explicit flags.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::FetchError;

/// How much one fetch may cost.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SourceLimits {
    /// Bytes a single download (pack or file) may transfer.
    pub download_bytes: u64,
    /// Files under a requested directory.
    pub files: usize,
    /// Total bytes of the configuration (a ConfigMap holds at most 1 MiB).
    pub config_bytes: u64,
    /// Seconds one fetch job may take, download and reading of the files together.
    pub timeout_seconds: u64,
    /// Entries (files and directories) walked under the requested path.
    pub tree_entries: usize,
    /// Bytes a remote's ref advertisement may take (a remote that lists refs forever is
    /// cut off here, before its pack is even asked for).
    pub refs_bytes: u64,
}

impl Default for SourceLimits {
    fn default() -> SourceLimits {
        SourceLimits {
            download_bytes: 64 * 1024 * 1024,
            files: 256,
            // Nothing larger could be held in the ConfigMap it is fetched for.
            config_bytes: metahooks_apiserver::CONFIG_MAP_CONTENT_BYTES as u64,
            timeout_seconds: 20,
            tree_entries: 4096,
            refs_bytes: 16 * 1024 * 1024,
        }
    }
}

/// What may be fetched: schemes, destinations and limits.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Policy {
    /// Schemes besides https that may be fetched (`http`, `git`, `file`).
    pub extra_schemes: BTreeSet<String>,
    /// Loopback, private and link-local destinations (cloud metadata included): the
    /// blunt switch.
    pub allow_private_addresses: bool,
    /// Destinations allowed one range at a time (`--allow-cidr`). A link-local (cloud
    /// metadata) address is allowed only by a range that lies inside the link-local
    /// block itself, so a wide range never opens it by accident.
    #[serde(default)]
    pub allow_cidrs: Vec<ipnet::IpNet>,
    /// Hosts that may resolve to private destinations (`--allow-host`): `git.corp.example`
    /// exactly, or `*.corp.example` for one or more labels before `corp.example`. Never
    /// a link-local (cloud metadata) address.
    #[serde(default)]
    pub allow_hosts: Vec<HostPattern>,
    /// Size, count and time bounds of a fetch.
    pub limits: SourceLimits,
    /// CAs every https source trusts besides the public web roots (`--source-ca-file`),
    /// as PEM.
    #[serde(default)]
    pub source_ca_pem: Option<String>,
    /// Egress proxies for http(s) sources ([`super::proxy`]).
    #[serde(default)]
    pub proxies: super::proxy::Proxies,
}

impl Policy {
    /// Parses and checks a URL's scheme. scp-like `user@host:path` is read as the ssh
    /// URL it stands for ([`scp_to_url`]).
    pub fn check_url(&self, raw: &str) -> Result<url::Url, FetchError> {
        let standard = scp_to_url(raw);
        let text = standard.as_deref().unwrap_or(raw);
        let parsed = url::Url::parse(text).map_err(|e| FetchError::InvalidUrl {
            url: raw.to_owned(),
            problem: url_problem(e),
        })?;
        let scheme = parsed.scheme();
        let allowed = scheme == "https"
            || (matches!(scheme, "http" | "git" | "ssh" | "file")
                && self.extra_schemes.contains(scheme));
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
        if scheme == "ssh" && parsed.password().is_some() {
            return Err(FetchError::InvalidUrl {
                url: super::redact_url(raw),
                problem: "an ssh URL carries no password; put credentials in the Secret".to_owned(),
            });
        }
        Ok(parsed)
    }

    /// Refuses a destination address that is not public, unless an allow-list (or the
    /// blunt `--allow-private-addresses`) admits it for `host`. The refusal names the
    /// address, the host and the flag that would allow it.
    pub fn check_address(&self, host: &str, address: IpAddr) -> Result<(), FetchError> {
        if self.allow_private_addresses {
            return Ok(());
        }
        let Some(why) = refusal(address) else {
            return Ok(());
        };
        if self.allows(host, address) {
            return Ok(());
        }
        let exact = if is_link_local(address) {
            ipnet::IpNet::from(judged(address))
        } else {
            ipnet::IpNet::from(address)
        };
        let how = if is_link_local(address) {
            format!(
                "cloud metadata lives in this range, so only --allow-cidr {exact} (a range inside the link-local block) allows it"
            )
        } else {
            format!(
                "allow it with --allow-cidr {exact} (or a range holding it) or --allow-host {host}"
            )
        };
        Err(FetchError::HostRefused {
            host: host.to_owned(),
            why: format!("{address} is {why}; {how}"),
        })
    }

    /// Whether an allow-list admits `address` (reached for `host`). An address that
    /// embeds an IPv4 address is judged by it too ([`judged`]): a range may name either,
    /// but where metadata may answer only a range inside the link-local block that holds
    /// the address really reached opens it.
    fn allows(&self, host: &str, address: IpAddr) -> bool {
        let reached = judged(address);
        let link_local = is_link_local(reached);
        let by_range = self.allow_cidrs.iter().any(|range| {
            if link_local {
                inside_link_local(range) && range.contains(&reached)
            } else {
                range.contains(&address) || range.contains(&reached)
            }
        });
        by_range || (!link_local && self.allow_hosts.iter().any(|pattern| pattern.matches(host)))
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
        // A proxied destination is named to the proxy, which resolves it (the server may
        // not even be able to); only the proxy's own address is checked, when connected.
        if self.allow_private_addresses
            || self
                .proxies
                .for_destination(parsed.scheme(), bare)
                .is_some()
        {
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

/// A host name pattern of `--allow-host`: a name, or `*.` and a name for any host one or
/// more labels below it. Compared without case and without a trailing dot.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostPattern {
    /// The name (below which any host matches when `wildcard`), lower-case.
    name: String,
    wildcard: bool,
}

impl HostPattern {
    /// Whether `host` (as a URL names it) matches.
    pub fn matches(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if !self.wildcard {
            return host == self.name;
        }
        host.strip_suffix(&self.name)
            .and_then(|below| below.strip_suffix('.'))
            .is_some_and(|labels| !labels.is_empty())
    }
}

/// An `--allow-host` value that is not a host name or `*.name` pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a host name or *.name pattern (letters, digits, '-' and '.'; '*' only as the first label)"
)]
pub struct NotAHostPattern(pub String);

impl std::str::FromStr for HostPattern {
    type Err = NotAHostPattern;

    fn from_str(raw: &str) -> Result<HostPattern, NotAHostPattern> {
        let lowered = raw.trim_end_matches('.').to_ascii_lowercase();
        let (wildcard, name) = match lowered.strip_prefix("*.") {
            Some(name) => (true, name.to_owned()),
            None => (false, lowered),
        };
        let label_ok = |label: &str| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        };
        if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
            return Err(NotAHostPattern(raw.to_owned()));
        }
        Ok(HostPattern { name, wildcard })
    }
}

impl TryFrom<String> for HostPattern {
    type Error = NotAHostPattern;

    fn try_from(raw: String) -> Result<HostPattern, NotAHostPattern> {
        raw.parse()
    }
}

impl From<HostPattern> for String {
    fn from(pattern: HostPattern) -> String {
        if pattern.wildcard {
            format!("*.{}", pattern.name)
        } else {
            pattern.name
        }
    }
}

/// The blocks where cloud metadata services answer: IPv4 link-local, IPv6 link-local,
/// and AWS's IPv6 metadata address (inside the unique-local block).
fn link_local_blocks() -> [ipnet::IpNet; 3] {
    [
        ipnet::IpNet::V4(ipnet::Ipv4Net::new_assert(
            std::net::Ipv4Addr::new(169, 254, 0, 0),
            16,
        )),
        ipnet::IpNet::V6(ipnet::Ipv6Net::new_assert(
            std::net::Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0),
            10,
        )),
        ipnet::IpNet::V6(ipnet::Ipv6Net::new_assert(
            std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
            128,
        )),
    ]
}

/// Whether `address` is where cloud metadata may answer (an address that embeds an
/// IPv4 address judged by it).
fn is_link_local(address: IpAddr) -> bool {
    let address = judged(address);
    link_local_blocks()
        .iter()
        .any(|block| block.contains(&address))
}

/// The address a connection to `address` really reaches, as far as the address tells:
/// the IPv4 address an IPv6 form embeds, else `address` itself. The one rule both
/// [`refusal`] and the allow-lists judge by.
pub fn judged(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(address, IpAddr::V4),
        v4 => v4,
    }
}

/// The IPv4 address an IPv6 address carries, in every form that carries one:
/// IPv4-mapped (`::ffff:0:0/96`), IPv4-compatible (`::/96`, deprecated; `::` and `::1`
/// excepted), NAT64 (`64:ff9b::/96` and the local-use `64:ff9b:1::/48`, RFC 6052's /96
/// layout), 6to4 (`2002::/16`, RFC 3056) and Teredo (`2001::/32`, RFC 4380: the client's
/// address, stored inverted).
pub fn embedded_v4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let s = v6.segments();
    let v4 = |high: u16, low: u16| {
        let [a, b] = high.to_be_bytes();
        let [c, d] = low.to_be_bytes();
        std::net::Ipv4Addr::new(a, b, c, d)
    };
    if let Some(mapped) = v6.to_ipv4_mapped() {
        return Some(mapped);
    }
    match s {
        [0, 0, 0, 0, 0, 0, high, low] if (high, low) != (0, 0) && (high, low) != (0, 1) => {
            Some(v4(high, low))
        }
        [0x64, 0xff9b, 0, 0, 0, 0, high, low] => Some(v4(high, low)),
        [0x64, 0xff9b, 1, _, _, _, high, low] => Some(v4(high, low)),
        [0x2002, high, low, ..] => Some(v4(high, low)),
        [0x2001, 0, _, _, _, _, high, low] => Some(v4(!high, !low)),
        _ => None,
    }
}

/// Whether an allowed range lies wholly inside a link-local block.
fn inside_link_local(range: &ipnet::IpNet) -> bool {
    link_local_blocks()
        .iter()
        .any(|block| block.contains(range))
}

/// What is wrong with a URL that does not parse, in words for whoever wrote it: the url
/// crate's "relative URL without a base" means the scheme is missing.
pub fn url_problem(error: url::ParseError) -> String {
    match error {
        url::ParseError::RelativeUrlWithoutBase => {
            "it has no scheme: write it as https://host/path (or ssh://user@host/path, user@host:path for ssh)".to_owned()
        }
        other => other.to_string(),
    }
}

/// scp-like syntax, as git reads it: `[user@]host:path` with no `://` and no `/` before
/// the first `:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScpUrl<'a> {
    /// The user before `@`, if any.
    pub user: Option<&'a str>,
    /// The host.
    pub host: &'a str,
    /// The path as the server reads it: relative to the login's home unless it starts
    /// with `/`.
    pub path: &'a str,
}

impl<'a> ScpUrl<'a> {
    /// `raw` as scp-like syntax, if it is that.
    pub fn parse(raw: &'a str) -> Option<ScpUrl<'a>> {
        if raw.contains("://") {
            return None;
        }
        let (authority, path) = raw.split_once(':')?;
        if authority.contains('/') || authority.is_empty() || path.is_empty() {
            return None;
        }
        let (user, host) = match authority.rsplit_once('@') {
            Some((user, host)) => (Some(user), host),
            None => (None, authority),
        };
        if host.is_empty() || host.contains(['[', ']']) || user.is_some_and(str::is_empty) {
            return None;
        }
        Some(ScpUrl { user, host, path })
    }
}

/// The `ssh://` URL an scp-like address stands for (`git@github.com:org/repo.git` →
/// `ssh://git@github.com/org/repo.git`), so that address and Secret-binding checks see
/// one form; None when `raw` is not scp-like.
pub fn scp_to_url(raw: &str) -> Option<String> {
    let scp = ScpUrl::parse(raw)?;
    let user = scp.user.map(|u| format!("{u}@")).unwrap_or_default();
    let slash = if scp.path.starts_with('/') { "" } else { "/" };
    Some(format!("ssh://{user}{}{slash}{}", scp.host, scp.path))
}

/// Special-purpose IPv4 ranges no source may reach, after the IANA IPv4 Special-Purpose
/// Address Registry (every block not globally reachable), plus multicast.
const REFUSED_V4: &[(&str, &str)] = &[
    ("0.0.0.0/8", "\"this network\" (0.0.0.0/8)"),
    ("10.0.0.0/8", "a private address"),
    ("100.64.0.0/10", "a shared (carrier-grade NAT) address"),
    ("127.0.0.0/8", "a loopback address"),
    (
        "169.254.0.0/16",
        "a link-local address (cloud metadata lives here)",
    ),
    ("172.16.0.0/12", "a private address"),
    ("192.0.0.0/24", "an IETF protocol assignment"),
    ("192.0.2.0/24", "a documentation address"),
    ("192.88.99.0/24", "a deprecated 6to4 relay address"),
    ("192.168.0.0/16", "a private address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),
    ("255.255.255.255/32", "the broadcast address"),
];

/// The same for IPv6 (IANA IPv6 Special-Purpose Address Registry). Blocks that embed an
/// IPv4 address (mapped, NAT64, 6to4) are judged by that address or refused outright.
const REFUSED_V6: &[(&str, &str)] = &[
    ("::/128", "the unspecified address"),
    ("::1/128", "a loopback address"),
    ("::/96", "an IPv4-compatible address (deprecated)"),
    ("64:ff9b:1::/48", "a local-use NAT64 address"),
    ("100::/64", "a discard-only address"),
    ("100:0:0:1::/64", "a dummy prefix"),
    (
        "2001::/23",
        "an IETF protocol assignment (Teredo, ORCHID and others)",
    ),
    ("2001:db8::/32", "a documentation address"),
    ("2002::/16", "a 6to4 address (it embeds an IPv4 address)"),
    ("3fff::/20", "a documentation address"),
    ("5f00::/16", "a segment-routing address"),
    ("fc00::/7", "a private (unique local) address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address (deprecated)"),
    ("ff00::/8", "a multicast address"),
];

fn table<N: std::str::FromStr>(rows: &[(&str, &'static str)]) -> Vec<(N, &'static str)> {
    rows.iter()
        .filter_map(|(net, why)| net.parse().ok().map(|n| (n, *why)))
        .collect()
}

/// Why an address is not a public destination, if it is not.
pub fn refusal(address: IpAddr) -> Option<&'static str> {
    use std::sync::LazyLock;
    static V4: LazyLock<Vec<(ipnet::Ipv4Net, &'static str)>> = LazyLock::new(|| table(REFUSED_V4));
    static V6: LazyLock<Vec<(ipnet::Ipv6Net, &'static str)>> = LazyLock::new(|| table(REFUSED_V6));
    match address {
        IpAddr::V4(v4) => V4
            .iter()
            .find(|(net, _)| net.contains(&v4))
            .map(|(_, why)| *why),
        IpAddr::V6(v6) => {
            // A form that carries an IPv4 address is judged by what it really reaches,
            // and stays refused as the special block it is in as well.
            if let Some(v4) = embedded_v4(v6)
                && let Some(why) = refusal(IpAddr::V4(v4))
            {
                return Some(why);
            }
            V6.iter()
                .find(|(net, _)| net.contains(&v6))
                .map(|(_, why)| *why)
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

    /// 169.254.169.254 in every IPv6 form that embeds an IPv4 address.
    const METADATA_IN_V6: &[&str] = &[
        "::ffff:169.254.169.254",
        "::169.254.169.254",
        "64:ff9b::a9fe:a9fe",
        "64:ff9b:1::a9fe:a9fe",
        "2002:a9fe:a9fe::1",
        // Teredo: server 192.0.2.1, client stored inverted (!a9fe = 5601).
        "2001:0:c000:201:0:0:5601:5601",
    ];

    #[test]
    fn embedded_metadata_addresses_stay_closed_under_the_widest_allow_lists() {
        let widest = Policy {
            allow_cidrs: vec!["::/0".parse().unwrap(), "0.0.0.0/0".parse().unwrap()],
            allow_hosts: vec![
                "*.example.com".parse().unwrap(),
                "metadata.example.com".parse().unwrap(),
            ],
            ..Policy::default()
        };
        for raw in METADATA_IN_V6 {
            let address: IpAddr = raw.parse().unwrap();
            assert_eq!(judged(address), IpAddr::from([169, 254, 169, 254]), "{raw}");
            let refused = widest.check_address("metadata.example.com", address);
            let Err(FetchError::HostRefused { why, .. }) = refused else {
                panic!("{raw} was let through: {refused:?}");
            };
            assert!(
                why.contains("--allow-cidr 169.254.169.254/32"),
                "{raw}: {why}"
            );
        }
        // A range inside the link-local block that holds the address reached opens it.
        let named = Policy {
            allow_cidrs: vec!["169.254.169.254/32".parse().unwrap()],
            ..Policy::default()
        };
        for raw in METADATA_IN_V6 {
            let address: IpAddr = raw.parse().unwrap();
            assert!(named.check_address("m", address).is_ok(), "{raw}");
        }
    }

    #[test]
    fn embedded_private_addresses_are_refused_and_public_ones_judged_by_their_block() {
        for raw in [
            "::ffff:10.0.0.1",
            "64:ff9b::7f00:1",
            "2002:c0a8:101::1",
            "::10.1.2.3",
        ] {
            let address: IpAddr = raw.parse().unwrap();
            assert!(refusal(address).is_some(), "{raw}");
        }
        // A public address mapped or behind the well-known NAT64 prefix is public.
        for raw in ["::ffff:8.8.8.8", "64:ff9b::808:808"] {
            assert_eq!(refusal(raw.parse().unwrap()), None, "{raw}");
        }
        // 6to4 and Teredo stay refused as the blocks they are, whatever they carry.
        for raw in ["2002:808:808::1", "2001:0:c000:201:0:0:f7f7:f7f7"] {
            assert!(refusal(raw.parse().unwrap()).is_some(), "{raw}");
        }
        // Loopback and unspecified are themselves, not IPv4-compatible addresses.
        for raw in ["::1", "::"] {
            let address: IpAddr = raw.parse().unwrap();
            assert_eq!(judged(address), address);
        }
    }

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
        let ssh = Policy {
            extra_schemes: ["ssh".to_owned()].into(),
            ..Policy::default()
        };
        let scp = ssh.check_url("git@github.com:org/repo.git").unwrap();
        assert_eq!(scp.as_str(), "ssh://git@github.com/org/repo.git");
        assert_eq!(
            ssh.check_url("ssh://git@example.com:2222/x")
                .unwrap()
                .port(),
            Some(2222)
        );
        assert_eq!(
            ssh.check_url("ssh://git:hunter2@example.com/x")
                .unwrap_err()
                .reason(),
            "InvalidURL"
        );
        let loose = Policy {
            extra_schemes: ["git".to_owned()].into(),
            ..Policy::default()
        };
        assert!(loose.check_url("git://127.0.0.1/x").is_ok());
        assert!(loose.check_url("http://127.0.0.1/x").is_err());
    }

    #[test]
    fn a_url_without_a_scheme_says_so() {
        let error = Policy::default()
            .check_url("git.example.com/team/app.git")
            .unwrap_err();
        assert_eq!(error.reason(), "InvalidURL");
        assert!(error.to_string().contains("has no scheme"), "{error}");
    }

    #[test]
    fn scp_like_addresses_are_read_as_git_reads_them() {
        let scp = ScpUrl::parse("git@github.com:org/repo.git").unwrap();
        assert_eq!(
            (scp.user, scp.host, scp.path),
            (Some("git"), "github.com", "org/repo.git")
        );
        assert_eq!(
            scp_to_url("host:/srv/repo.git").as_deref(),
            Some("ssh://host/srv/repo.git")
        );
        for not_scp in [
            "https://example.com/x",
            "./local:path",
            "dir/with:colon",
            "host:",
            ":path",
            "@host:path",
            "[::1]:path",
        ] {
            assert_eq!(ScpUrl::parse(not_scp), None, "{not_scp}");
        }
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
            "0.1.2.3",
            "100.127.255.255",
            "192.0.0.170",
            "198.18.0.1",
            "198.19.255.255",
            "240.0.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::7f00:1",
            "2002:a9fe:a9fe::1",
            "2001:db8::1",
            "2001::1",
            "::7f00:1",
            "ff02::1",
            "fec0::1",
        ] {
            assert!(
                policy.check_address("h", address.parse().unwrap()).is_err(),
                "{address}"
            );
        }
        for public in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700:4700::1111",
            "64:ff9b::5db8:d822",
        ] {
            assert!(
                policy.check_address("h", public.parse().unwrap()).is_ok(),
                "{public}"
            );
        }
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

    fn allowing(cidrs: &[&str], hosts: &[&str]) -> Policy {
        Policy {
            allow_cidrs: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
            allow_hosts: hosts.iter().map(|h| h.parse().unwrap()).collect(),
            ..Policy::default()
        }
    }

    fn refused(policy: &Policy, host: &str, address: &str) -> Option<String> {
        policy
            .check_address(host, address.parse().unwrap())
            .err()
            .map(|e| e.to_string())
    }

    #[test]
    fn an_allowed_range_opens_its_addresses_and_nothing_else() {
        let policy = allowing(&["10.20.0.0/16"], &[]);
        assert_eq!(refused(&policy, "gitlab", "10.20.0.5"), None);
        let other = refused(&policy, "gitlab", "10.21.0.5").unwrap();
        assert!(
            other.contains("host gitlab is refused: 10.21.0.5 is a private address")
                && other.contains("--allow-cidr 10.21.0.5/32")
                && other.contains("--allow-host gitlab"),
            "{other}"
        );
        assert!(refused(&policy, "x", "127.0.0.1").is_some());
    }

    #[test]
    fn metadata_addresses_need_a_range_inside_the_link_local_block() {
        // A wide range, or a host allowed by name, never opens cloud metadata.
        let wide = allowing(&["0.0.0.0/0", "::/0"], &["*.corp.example"]);
        for metadata in [
            "169.254.169.254",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:169.254.169.254",
        ] {
            let message = refused(&wide, "metadata.corp.example", metadata)
                .unwrap_or_else(|| panic!("{metadata} was allowed"));
            assert!(message.contains("only --allow-cidr"), "{message}");
        }
        // Everything else the wide range holds is allowed.
        assert_eq!(refused(&wide, "h", "10.0.0.1"), None);
        assert_eq!(refused(&wide, "h", "fd00::1"), None);
        // Named exactly, it is allowed.
        let exact = allowing(&["169.254.169.254/32", "fd00:ec2::254/128"], &[]);
        assert_eq!(refused(&exact, "h", "169.254.169.254"), None);
        assert_eq!(refused(&exact, "h", "fd00:ec2::254"), None);
        assert!(refused(&exact, "h", "169.254.169.253").is_some());
    }

    #[test]
    fn host_patterns_match_a_name_or_the_labels_below_it() {
        let policy = allowing(&[], &["git.corp.example", "*.internal.example"]);
        assert_eq!(refused(&policy, "git.corp.example", "10.0.0.1"), None);
        assert_eq!(refused(&policy, "GIT.corp.example.", "10.0.0.1"), None);
        assert!(refused(&policy, "other.corp.example", "10.0.0.1").is_some());
        assert_eq!(refused(&policy, "a.internal.example", "10.0.0.1"), None);
        assert_eq!(
            refused(&policy, "a.b.internal.example", "192.168.1.1"),
            None
        );
        assert!(refused(&policy, "internal.example", "10.0.0.1").is_some());
        assert!(refused(&policy, "evilinternal.example", "10.0.0.1").is_some());
        for bad in ["", "*", "*.", "a.*.b", "a b", "-a.example", "a..b"] {
            assert!(bad.parse::<HostPattern>().is_err(), "{bad:?} parsed");
        }
        // Patterns travel to fetch workers as text.
        let json = serde_json::to_string(&policy).unwrap();
        let back: Policy = serde_json::from_str(&json).unwrap();
        assert_eq!(back.allow_hosts, policy.allow_hosts);
    }
}
