//! OpenSSH `known_hosts` as a Secret carries it (Flux's `known_hosts` key), read without
//! trusting it: bounded in size, every line parsed or named in the error.
//!
//! The rules are OpenSSH's (sshd(8) "SSH_KNOWN_HOSTS FILE FORMAT"): a line lists host
//! patterns (comma-separated, `*` and `?` wildcards, `!` negation, `[host]:port` for a
//! port other than 22, or one hashed entry `|1|salt|hmac`), a key type and the key in
//! base64. `@revoked` keys are refused even where another line lists them; an
//! `@cert-authority` line is not understood here and is refused by name rather than
//! silently skipped, so nobody believes a CA is in force when it is not.

use base64::Engine;
use hmac::{Hmac, Mac};

/// Longest `known_hosts` read (GitHub's three keys take under 1 KiB).
pub const MAX_BYTES: usize = 64 * 1024;
/// Most lines read.
pub const MAX_LINES: usize = 512;

/// The keys a Secret trusts, by host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownHosts {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    hosts: Hosts,
    key_type: String,
    /// The key as base64 (as written) and decoded (as the server sends it).
    key_text: String,
    key: Vec<u8>,
    revoked: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Hosts {
    Patterns(Vec<String>),
    /// `|1|salt|hmac`: HMAC-SHA1 of the host name under the salt.
    Hashed {
        salt: Vec<u8>,
        digest: Vec<u8>,
    },
}

/// Why a host key is not trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Distrust {
    /// No line names the host.
    Unlisted,
    /// Lines name the host, none with this key.
    Mismatch {
        /// The key types listed for the host.
        listed: Vec<String>,
    },
    /// The key is marked `@revoked`.
    Revoked,
}

impl KnownHosts {
    /// Parses `text`.
    ///
    /// # Errors
    /// Too large, too many lines, or a line that is not `[marker] hosts type key`; the
    /// message names the line.
    pub fn parse(text: &str) -> Result<KnownHosts, KnownHostsError> {
        if text.len() > MAX_BYTES {
            return Err(KnownHostsError::TooLarge { bytes: text.len() });
        }
        let mut entries = Vec::new();
        for (index, line) in text.lines().enumerate() {
            if index >= MAX_LINES {
                return Err(KnownHostsError::TooManyLines);
            }
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            entries.push(parse_line(line).map_err(|problem| KnownHostsError::Line {
                number: index + 1,
                problem,
            })?);
        }
        if entries.is_empty() {
            return Err(KnownHostsError::NoKeys);
        }
        Ok(KnownHosts { entries })
    }

    /// Whether `key` (the raw key blob the server sent) is trusted for `host` at `port`.
    ///
    /// # Errors
    /// Why not.
    pub fn check(&self, host: &str, port: u16, key: &[u8]) -> Result<(), Distrust> {
        let names = host_names(host, port);
        let listed: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|entry| entry.hosts.matches(&names))
            .collect();
        if listed.iter().any(|entry| entry.revoked && entry.key == key) {
            return Err(Distrust::Revoked);
        }
        if listed
            .iter()
            .any(|entry| !entry.revoked && entry.key == key)
        {
            return Ok(());
        }
        let mut types: Vec<String> = listed
            .iter()
            .filter(|entry| !entry.revoked)
            .map(|entry| entry.key_type.clone())
            .collect();
        types.dedup();
        if types.is_empty() {
            Err(Distrust::Unlisted)
        } else {
            Err(Distrust::Mismatch { listed: types })
        }
    }

    /// The trusted keys of `host`/`port` as `known_hosts` lines for `alias` (the address
    /// the SSH client really connects to). libssh2 offers the server the key types it
    /// finds listed for the host it connects to, so a server holding several keys shows
    /// one the Secret trusts.
    pub fn lines_for(&self, host: &str, port: u16, alias: &str) -> String {
        let names = host_names(host, port);
        self.entries
            .iter()
            .filter(|entry| !entry.revoked && entry.hosts.matches(&names))
            .map(|entry| format!("{alias} {} {}\n", entry.key_type, entry.key_text))
            .collect()
    }
}

impl Distrust {
    /// A sentence for the condition message.
    pub fn explain(&self, host: &str, port: u16, secret: &str) -> String {
        let shown = host_names(host, port).remove(0);
        match self {
            Distrust::Unlisted => {
                format!("known_hosts of Secret {secret:?} lists no key for {shown}")
            }
            Distrust::Mismatch { listed } => format!(
                "the host key {shown} presented is not the one known_hosts of Secret {secret:?} lists for it ({}); the server's key changed, or this is not the server",
                listed.join(", ")
            ),
            Distrust::Revoked => {
                format!(
                    "the host key {shown} presented is marked @revoked in known_hosts of Secret {secret:?}"
                )
            }
        }
    }
}

/// The names a host goes by in `known_hosts`: `host` on port 22, else `[host]:port`.
fn host_names(host: &str, port: u16) -> Vec<String> {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    if port == 22 {
        vec![host]
    } else {
        vec![format!("[{host}]:{port}")]
    }
}

/// Why a known_hosts text cannot be used; a line's problem names the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // each variant is described by its #[error] message
pub enum KnownHostsError {
    #[error("known_hosts is {bytes} bytes; at most {MAX_BYTES} are read")]
    TooLarge { bytes: usize },
    #[error("known_hosts has more than {MAX_LINES} lines; at most {MAX_LINES} are read")]
    TooManyLines,
    #[error("known_hosts line {number}: {problem}")]
    Line { number: usize, problem: LineError },
    #[error("known_hosts lists no host keys")]
    NoKeys,
}

/// What is wrong with one known_hosts line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // each variant is described by its #[error] message
pub enum LineError {
    #[error("@cert-authority lines are not supported; list the host keys themselves")]
    CertAuthority,
    #[error("unknown marker @{0}")]
    UnknownMarker(String),
    #[error("expected `hosts key-type base64-key`")]
    Fields,
    #[error("the key is not base64: {0}")]
    KeyNotBase64(String),
    #[error("the key is not a {0} key")]
    KeyType(String),
    #[error("a hashed host is `|1|salt|hash`")]
    HashedHost,
    #[error("the hashed host is not base64: {0}")]
    HashedHostNotBase64(String),
    #[error("no host pattern")]
    NoHostPattern,
}

fn parse_line(line: &str) -> Result<Entry, LineError> {
    let mut fields = line.split_whitespace();
    let mut first = fields.next().unwrap_or_default();
    let mut revoked = false;
    if let Some(marker) = first.strip_prefix('@') {
        match marker {
            "revoked" => revoked = true,
            "cert-authority" => return Err(LineError::CertAuthority),
            other => return Err(LineError::UnknownMarker(other.to_owned())),
        }
        first = fields.next().unwrap_or_default();
    }
    let (Some(key_type), Some(key_text)) = (fields.next(), fields.next()) else {
        return Err(LineError::Fields);
    };
    let key = base64::engine::general_purpose::STANDARD
        .decode(key_text)
        .map_err(|e| LineError::KeyNotBase64(e.to_string()))?;
    // The blob starts with its own type name (RFC 4253 §6.6): a line whose type and
    // blob disagree is a paste error.
    if blob_type(&key) != Some(key_type) {
        return Err(LineError::KeyType(key_type.to_owned()));
    }
    Ok(Entry {
        hosts: parse_hosts(first)?,
        key_type: key_type.to_owned(),
        key_text: key_text.to_owned(),
        key,
        revoked,
    })
}

fn blob_type(blob: &[u8]) -> Option<&str> {
    let length = u32::from_be_bytes(blob.get(..4)?.try_into().ok()?) as usize;
    std::str::from_utf8(blob.get(4..4 + length)?).ok()
}

fn parse_hosts(field: &str) -> Result<Hosts, LineError> {
    if let Some(hashed) = field.strip_prefix("|1|") {
        let (salt, digest) = hashed.split_once('|').ok_or(LineError::HashedHost)?;
        let decode = |text: &str| {
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| LineError::HashedHostNotBase64(e.to_string()))
        };
        return Ok(Hosts::Hashed {
            salt: decode(salt)?,
            digest: decode(digest)?,
        });
    }
    let patterns: Vec<String> = field
        .split(',')
        .filter(|p| !p.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    if patterns.is_empty() {
        return Err(LineError::NoHostPattern);
    }
    Ok(Hosts::Patterns(patterns))
}

impl Hosts {
    fn matches(&self, names: &[String]) -> bool {
        names.iter().any(|name| match self {
            Hosts::Hashed { salt, digest } => {
                let Ok(mut mac) = Hmac::<sha1::Sha1>::new_from_slice(salt) else {
                    return false;
                };
                mac.update(name.as_bytes());
                mac.verify_slice(digest).is_ok()
            }
            Hosts::Patterns(patterns) => {
                let mut matched = false;
                for pattern in patterns {
                    if let Some(negated) = pattern.strip_prefix('!') {
                        if glob(negated.as_bytes(), name.as_bytes()) {
                            return false;
                        }
                    } else if glob(pattern.as_bytes(), name.as_bytes()) {
                        matched = true;
                    }
                }
                matched
            }
        })
    }
}

/// `*` and `?` wildcards, iteratively (no recursion for a hostile pattern to exploit).
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut resume: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                resume = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match resume {
                Some((star, at)) => {
                    p = star + 1;
                    n = at + 1;
                    resume = Some((star, at + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key blob of `key_type` with `body` after the type name.
    fn blob(key_type: &str, body: &[u8]) -> Vec<u8> {
        let mut out = (key_type.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(key_type.as_bytes());
        out.extend_from_slice(body);
        out
    }

    fn line(hosts: &str, key_type: &str, body: &[u8]) -> String {
        let text = base64::engine::general_purpose::STANDARD.encode(blob(key_type, body));
        format!("{hosts} {key_type} {text}")
    }

    #[test]
    fn plain_hosts_ports_wildcards_and_negation() {
        let text = [
            line("github.com,140.82.121.4", "ssh-ed25519", b"gh"),
            line("[git.example.com]:2222", "ssh-ed25519", b"ex"),
            line("*.corp.example,!bad.corp.example", "ssh-ed25519", b"corp"),
        ]
        .join("\n");
        let known = KnownHosts::parse(&text).unwrap();
        let gh = blob("ssh-ed25519", b"gh");
        assert_eq!(known.check("github.com", 22, &gh), Ok(()));
        assert_eq!(known.check("GitHub.com", 22, &gh), Ok(()));
        assert_eq!(
            known.check("github.com", 2222, &gh),
            Err(Distrust::Unlisted),
            "a port other than 22 is its own name"
        );
        assert_eq!(
            known.check("git.example.com", 2222, &blob("ssh-ed25519", b"ex")),
            Ok(())
        );
        let corp = blob("ssh-ed25519", b"corp");
        assert_eq!(known.check("git.corp.example", 22, &corp), Ok(()));
        assert_eq!(
            known.check("bad.corp.example", 22, &corp),
            Err(Distrust::Unlisted)
        );
        assert_eq!(
            known.check("github.com", 22, &blob("ssh-ed25519", b"other")),
            Err(Distrust::Mismatch {
                listed: vec!["ssh-ed25519".to_owned()]
            })
        );
    }

    #[test]
    fn hashed_hosts_match_by_hmac() {
        let salt = b"0123456789abcdefghij";
        let mut mac = Hmac::<sha1::Sha1>::new_from_slice(salt).unwrap();
        mac.update(b"[10.0.0.5]:2222");
        let digest = mac.finalize().into_bytes();
        let engine = base64::engine::general_purpose::STANDARD;
        let hosts = format!("|1|{}|{}", engine.encode(salt), engine.encode(digest));
        let known = KnownHosts::parse(&line(&hosts, "ssh-rsa", b"k")).unwrap();
        assert_eq!(
            known.check("10.0.0.5", 2222, &blob("ssh-rsa", b"k")),
            Ok(())
        );
        assert_eq!(
            known.check("10.0.0.5", 22, &blob("ssh-rsa", b"k")),
            Err(Distrust::Unlisted)
        );
    }

    #[test]
    fn revoked_keys_win_and_bad_lines_are_named() {
        let text = format!(
            "{}\n@revoked {}",
            line("h", "ssh-ed25519", b"k"),
            line("h", "ssh-ed25519", b"k")
        );
        let known = KnownHosts::parse(&text).unwrap();
        assert_eq!(
            known.check("h", 22, &blob("ssh-ed25519", b"k")),
            Err(Distrust::Revoked)
        );
        let wrong_type = format!(
            "h ssh-rsa {}",
            base64::engine::general_purpose::STANDARD.encode(blob("ssh-ed25519", b"k"))
        );
        let error = KnownHosts::parse(&format!("# c\n\n{wrong_type}")).unwrap_err();
        assert_eq!(
            error,
            KnownHostsError::Line {
                number: 3,
                problem: LineError::KeyType("ssh-rsa".to_owned())
            }
        );
        assert_eq!(
            error.to_string(),
            "known_hosts line 3: the key is not a ssh-rsa key"
        );
        assert_eq!(
            KnownHosts::parse("@cert-authority *.example ssh-ed25519 AAAA"),
            Err(KnownHostsError::Line {
                number: 1,
                problem: LineError::CertAuthority
            })
        );
        assert_eq!(KnownHosts::parse("# nothing"), Err(KnownHostsError::NoKeys));
        assert_eq!(
            KnownHosts::parse(&"x".repeat(MAX_BYTES + 1)),
            Err(KnownHostsError::TooLarge {
                bytes: MAX_BYTES + 1
            })
        );
    }

    #[test]
    fn glob_backtracks_without_blowing_up() {
        assert!(glob(b"a*b*c", b"axxbyyc"));
        assert!(!glob(b"a*b*c", b"axxbyy"));
        let name = vec![b'a'; 4000];
        let pattern = [b"*".repeat(50), b"b".to_vec()].concat();
        assert!(!glob(&pattern, &name));
    }

    #[test]
    fn lines_for_rewrites_the_trusted_keys_to_the_alias() {
        let text = [
            line("github.com", "ssh-ed25519", b"a"),
            line("github.com", "ecdsa-sha2-nistp256", b"b"),
            line("other", "ssh-rsa", b"c"),
        ]
        .join("\n");
        let known = KnownHosts::parse(&text).unwrap();
        let lines = known.lines_for("github.com", 22, "[127.0.0.1]:4000");
        assert_eq!(lines.lines().count(), 2, "{lines}");
        assert!(
            lines.lines().all(|l| l.starts_with("[127.0.0.1]:4000 ")),
            "{lines}"
        );
    }
}
