//! The config-source engine: fetches configuration from git repositories and HTTP(S)
//! files in the background and hands hooks cheap, never-blocking snapshots.
//!
//! - [`SourceRequest`] names what a parent needs (url, ref, path, credentials);
//! - [`Sources`] is the read side controllers see: `lookup` answers at once from the
//!   cache and schedules a fetch when the entry is missing or older than the interval;
//! - [`fetcher::Fetcher`] is the writer: one fetch per remote per interval, however
//!   many parents share it; a failed fetch keeps the last good snapshot;
//! - [`policy`] holds the safety rules (schemes, addresses, sizes, paths) that every
//!   fetch passes before it touches the network;
//! - [`git`] and `http` do the blocking/async work, bounded in time and size.
//!
//! A crate of its own, so that what the server and its controllers may use is what this
//! file exports: they cannot reach the fetcher's state, its jobs or its HTTP client.

#![warn(missing_docs)]

pub mod binding;
mod client;
mod connect_guard;
pub mod derived;
mod disk;
mod error;
#[cfg(any(test, feature = "test-support"))]
pub mod fake;
pub mod fetcher;
pub mod git;
mod http;
mod key;
pub mod known_hosts;
pub mod log_text;
pub mod metrics;
pub mod policy;
pub mod proxy;
pub mod repository;
mod revision;
pub mod signature;
pub mod tag_range;
#[cfg(test)]
mod test_pki;
pub mod tls;
pub mod worker;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub use self::error::FetchError;
pub use self::key::{RemoteKey, SourceKey};
pub use self::revision::Revision;

/// Where configuration comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Location {
    /// A git repository; `reference` is a branch, tag or commit (None: remote HEAD);
    /// `path` a file or directory inside it ("" for the root).
    Git {
        /// Repository URL.
        url: String,
        /// Branch, tag or commit (None: the remote's HEAD).
        reference: Option<String>,
        /// A semver range: the highest tag in it, picked at each poll (instead of
        /// `reference`; see [`tag_range`]).
        semver: Option<String>,
        /// The keys whose signatures the commit (or tag) must carry to be read; see
        /// [`signature`]. Part of the snapshot's key, not the remote's.
        verify: Option<signature::TrustedKeys>,
        /// File or directory inside the repository ("" for the root).
        path: String,
    },
    /// One file over HTTP(S).
    Http {
        /// The file's URL.
        url: String,
    },
}

impl Location {
    /// The URL, for whichever kind of source.
    pub fn url(&self) -> &str {
        match self {
            Location::Git { url, .. } | Location::Http { url } => url,
        }
    }
}

/// Credentials from a Secret (`username`/`password` or `token`), with the URLs the
/// Secret's owner allows them to reach.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Credentials {
    /// The Secret they came from (named in refusals).
    pub secret: String,
    /// Where they may be sent ([`binding`]).
    pub binding: binding::Binding,
    /// User name for basic auth (git's userpass).
    pub username: Option<String>,
    /// Password for `username`.
    pub password: Option<String>,
    /// A token, sent as the password of a conventional user or as a bearer token.
    pub token: Option<String>,
    /// An SSH private key (Flux's `identity`); `password` unlocks it when encrypted.
    #[serde(default)]
    pub identity: Option<String>,
    /// The host keys SSH trusts (Flux's `known_hosts`): required for ssh, no trust on
    /// first use.
    #[serde(default)]
    pub known_hosts: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(<redacted>)")
    }
}

impl Default for Credentials {
    /// No values and bound to nothing: sent nowhere until a binding is given.
    fn default() -> Credentials {
        Credentials {
            secret: String::new(),
            binding: binding::Binding::Refused(binding::Refusal::Unbound),
            username: None,
            password: None,
            token: None,
            identity: None,
            known_hosts: None,
        }
    }
}

impl Credentials {
    /// Refuses `url` unless the Secret's binding covers it; the error names the Secret
    /// and the URL (without user-info).
    pub fn check_url(&self, url: &str) -> Result<(), FetchError> {
        self.binding
            .check(url)
            .map_err(|why| FetchError::CredentialsNotAllowed {
                secret: self.secret.clone(),
                url: redact_url(url),
                why,
            })
    }

    /// Distinguishes cache entries of different credential holders, so one tenant's
    /// access never serves another's request for the same URL. Keyed with a secret drawn
    /// when the process starts: the fingerprint says nothing about the password to
    /// anyone who sees it (it is never logged, but keys end up in memory dumps), and it
    /// cannot be precomputed.
    pub fn fingerprint(&self) -> String {
        self.fingerprint_with(fingerprint_key())
    }

    /// The fingerprint under another key (the on-disk cache's, which outlives the
    /// process).
    pub fn fingerprint_with(&self, key: &[u8; 32]) -> String {
        let mut parts = metahooks_hash::Parts::keyed(key);
        for part in [
            &self.username,
            &self.password,
            &self.token,
            &self.identity,
            &self.known_hosts,
        ] {
            parts.optional(part.as_deref().map(str::as_bytes));
        }
        hex::encode(&parts.finish()[..12])
    }

    /// (user, secret) for HTTP basic auth or git's userpass; a token alone goes as the
    /// password of a conventional user, which GitHub, GitLab and Gitea accept.
    pub fn userpass(&self) -> Option<(String, String)> {
        match (&self.username, &self.password, &self.token) {
            (Some(user), Some(password), _) => Some((user.clone(), password.clone())),
            (user, None, Some(token)) => Some((
                user.clone().unwrap_or_else(|| "x-access-token".to_owned()),
                token.clone(),
            )),
            _ => None,
        }
    }
}

/// The per-process key of [`Credentials::fingerprint`], from the OS's random source.
fn fingerprint_key() -> &'static [u8; 32] {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    KEY.get_or_init(random_key)
}

/// 32 bytes from the OS's random source (`getrandom(2)`). Where it cannot be read (a
/// sandbox that forbids the call), std's hasher seeding, which the kernel also seeds.
fn random_key() -> [u8; 32] {
    use std::hash::{BuildHasher, Hasher};
    let mut key = [0u8; 32];
    if getrandom::fill(&mut key).is_ok() {
        return key;
    }
    for chunk in key.chunks_mut(8) {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(0x6d65_7461_686f_6f6b);
        chunk.copy_from_slice(&hasher.finish().to_le_bytes());
    }
    key
}

/// Query parameters whose values are shown as they are: they name what is fetched, and
/// none of them is a credential anywhere. Every other value is replaced by
/// [`REDACTED`], since tokens travel in queries (`private_token`, `X-Amz-Signature`,
/// `sig`, `token`, …) and their names cannot all be known.
const SHOWN_QUERY_NAMES: &[&str] = &[
    "ref", "branch", "tag", "path", "file", "format", "raw", "inline", "service", "version",
];

/// What a hidden value reads as.
pub const REDACTED: &str = "redacted";

/// A URL as it may be shown in status, events and logs: without the user name and
/// password someone wrote into it (`https://user:token@host/…`), with the value of every
/// query parameter not known to be harmless replaced by [`REDACTED`], and without its
/// fragment (never sent, and nothing a reader needs).
pub fn redact_url(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(mut parsed) => {
            if parsed.password().is_some() || !parsed.username().is_empty() {
                let _ = parsed.set_password(None);
                let _ = parsed.set_username("");
            }
            if parsed.query().is_some() {
                let pairs: Vec<(String, String)> = parsed
                    .query_pairs()
                    .map(|(name, value)| {
                        let shown = SHOWN_QUERY_NAMES
                            .iter()
                            .any(|harmless| name.eq_ignore_ascii_case(harmless));
                        let value = if shown || value.is_empty() {
                            value.into_owned()
                        } else {
                            REDACTED.to_owned()
                        };
                        (name.into_owned(), value)
                    })
                    .collect();
                parsed.set_query(None);
                if !pairs.is_empty() {
                    parsed.query_pairs_mut().extend_pairs(pairs);
                }
            }
            parsed.set_fragment(None);
            parsed.to_string()
        }
        // Not a URL we can parse: cut anything that looks like user-info before a host,
        // and everything from a query or fragment on.
        Err(_) => {
            let cut = raw.find(['?', '#']).map_or(raw, |at| &raw[..at]);
            match (cut.find("://"), cut.rfind('@')) {
                (Some(scheme_end), Some(at)) if at > scheme_end => {
                    format!("{}{}", &cut[..scheme_end + 3], &cut[at + 1..])
                }
                _ => cut.to_owned(),
            }
        }
    }
}

/// A URL as a metric label: [`redact_url`] without any query at all, so that neither a
/// secret nor a changing parameter makes a series of its own.
pub fn remote_label(raw: &str) -> String {
    let shown = redact_url(raw);
    match shown.find('?') {
        Some(at) => shown[..at].to_owned(),
        None => shown,
    }
}

/// What one parent asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRequest {
    /// Where the configuration is.
    pub location: Location,
    /// The parent's namespace: fetches are queued fairly between namespaces. Not part
    /// of the keys: parents of several namespaces share one fetch of a remote.
    pub namespace: String,
    /// Credentials from the parent's Secret, if it names one.
    pub credentials: Option<Credentials>,
    /// CA and client certificate from the parent's `certSecretRef`, if it names one.
    pub tls: Option<tls::TlsMaterial>,
}

impl SourceRequest {
    /// Key of the snapshot: the remote's key and, for git, the path.
    pub fn key(&self) -> SourceKey {
        let (path, trust) = match &self.location {
            Location::Git { path, verify, .. } => (
                Some(path.clone()),
                verify.as_ref().map(signature::TrustedKeys::digest),
            ),
            Location::Http { .. } => (None, None),
        };
        SourceKey {
            remote: self.remote_key(),
            path,
            trust,
        }
    }

    /// Key of the remote fetch shared by every request for the same url+ref+credentials.
    pub fn remote_key(&self) -> RemoteKey {
        let mut holder = self
            .credentials
            .as_ref()
            .map(Credentials::fingerprint)
            .unwrap_or_default();
        if let Some(tls) = &self.tls {
            holder.push('+');
            holder.push_str(&tls.fingerprint());
        }
        match &self.location {
            Location::Git {
                url,
                reference,
                semver,
                ..
            } => RemoteKey {
                protocol: key::Protocol::Git,
                url: url.clone(),
                // An empty ref asks for the default branch, as none does.
                reference: reference.clone().filter(|r| !r.is_empty()),
                semver: semver.clone(),
                holder,
            },
            Location::Http { url } => RemoteKey {
                protocol: key::Protocol::Http,
                url: url.clone(),
                reference: None,
                semver: None,
                holder,
            },
        }
    }
}

/// A file's content: text goes to ConfigMap `data`, anything else to `binaryData`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Content {
    /// UTF-8 text.
    Text(String),
    /// Anything else, as bytes (base64 when serialised: fetch workers send snapshots back
    /// as JSON).
    Binary(#[serde(with = "base64_bytes")] Vec<u8>),
}

/// Bytes as one base64 string in serde formats.
mod base64_bytes {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = <&str>::deserialize(deserializer)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

impl Content {
    /// Text when the bytes are UTF-8, else binary.
    pub fn from_bytes(bytes: Vec<u8>) -> Content {
        match String::from_utf8(bytes) {
            Ok(text) => Content::Text(text),
            Err(error) => Content::Binary(error.into_bytes()),
        }
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        match self {
            Content::Text(text) => text.len(),
            Content::Binary(bytes) => bytes.len(),
        }
    }

    /// True when no bytes are held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Fetched configuration at one revision.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// `<ref>@sha1:<commit>` for git, `sha256:<hash>` for HTTP.
    pub revision: Revision,
    /// Files by path relative to the requested path (a single file is keyed by its name).
    pub files: BTreeMap<String, Content>,
    /// True when the request named one file (not a directory).
    pub single_file: bool,
    /// When the source says this content was made, in seconds since the epoch: the
    /// commit's committer time for git; none for HTTP. The same on every replica, so
    /// replicas can agree which of two revisions is the newer one.
    pub made_at: Option<i64>,
    /// Who signed the commit and tag, when the request asked for verification.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signed_by: Vec<signature::Signer>,
    /// What pure steps made of these files, kept with them (and weighed with them).
    #[serde(skip)]
    pub derived: derived::Derived,
}

impl Snapshot {
    /// Files at one revision, with nothing made of them yet.
    pub fn new(
        revision: String,
        files: BTreeMap<String, Content>,
        single_file: bool,
        made_at: Option<i64>,
    ) -> Snapshot {
        Snapshot {
            revision: Revision::new(revision),
            files,
            single_file,
            made_at,
            signed_by: Vec::new(),
            derived: derived::Derived::default(),
        }
    }
}

/// What the cache knows about a request right now.
#[derive(Debug, Clone, Default)]
pub struct SourceState {
    /// The last good snapshot, however old.
    pub snapshot: Option<Arc<Snapshot>>,
    /// The error of the latest fetch, if it failed (the snapshot is then older).
    pub error: Option<FetchError>,
    /// A fetch is scheduled or running; ask again soon.
    pub pending: bool,
    /// Sync again within this many seconds whatever the interval: push receivers are
    /// listening, and a push is only seen at the next sync.
    pub resync_within: Option<u64>,
    /// The snapshot comes from a fetch that started after the engine first heard that
    /// the parent runs the revision it named (or it is that revision): it is then at
    /// least as new as what runs on the same ref, or the ref was rewritten since. False
    /// while what runs may be newer (another replica fetched after this one).
    pub after_running: bool,
}

impl SourceState {
    /// What an answer built from this state depends on: the same `Seen` later means the
    /// same answer.
    pub fn seen(&self) -> Seen {
        Seen {
            revision: self.snapshot.as_ref().map(|s| s.revision.clone()),
            error: self.error.clone(),
            pending: self.pending,
            resync_within: self.resync_within,
            after_running: self.after_running,
        }
    }
}

/// What a call read of a source ([`SourceState::seen`]), to tell later whether the
/// engine still holds the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The revision of the snapshot held (None: none held).
    pub revision: Option<Revision>,
    /// The latest fetch's error.
    pub error: Option<FetchError>,
    /// Whether a fetch ran or was due.
    pub pending: bool,
    /// The push receivers' resync bound.
    pub resync_within: Option<u64>,
    /// Whether the snapshot was fetched after what the parent runs was heard of.
    pub after_running: bool,
}

/// What controllers see of the engine during a call: answers from what it holds now,
/// never scheduling anything. What a call wants done ([`Interest`]) goes back to the
/// engine through [`Sources::want`] once the call has answered.
pub trait SourceView: Send + Sync {
    /// What the engine holds for `request`, as a parent asking at `interval` (and running
    /// revision `running`, read back from its observed ConfigMap) sees it: `pending`
    /// when a fetch runs or is due, so the parent asks again soon.
    fn state(
        &self,
        request: &SourceRequest,
        interval: Duration,
        running: Option<&Revision>,
    ) -> SourceState;

    /// Where the "fetch now" `token` of `request`'s remote stands: `Handled` once a fetch
    /// that started after it was first asked for has finished. An engine that does not
    /// schedule (a fixed test engine) has handled every token.
    fn token(&self, request: &SourceRequest, token: &str) -> Refresh {
        let _ = (request, token);
        Refresh::Handled
    }
}

/// What one call asks of the engine for one source: keep it fresh at `interval`, note
/// that the parent runs `running`, fetch now for a new `fetch_now` token, or fetch now
/// because what runs is newer than the engine's copy (`behind`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interest {
    /// The source.
    pub request: SourceRequest,
    /// How often the parent wants it polled.
    pub interval: Duration,
    /// The revision the parent runs (so a copy let go need not be read again for it).
    pub running: Option<Revision>,
    /// A "fetch now" token not handled yet.
    pub fetch_now: Option<String>,
    /// Another replica fetched a newer copy of the same ref: fetch now.
    pub behind: bool,
    /// The parent that asks (`namespace/name`), so a failed fetch can say how many wait
    /// on it; None when no parent asks (a receiver, a test).
    pub parent: Option<std::sync::Arc<str>>,
}

impl Interest {
    /// Keep `request` fresh at `interval`.
    pub fn keep(request: &SourceRequest, interval: Duration) -> Interest {
        Interest {
            request: request.clone(),
            interval,
            running: None,
            fetch_now: None,
            behind: false,
            parent: None,
        }
    }
}

/// The engine: the view controllers read, and what calls and receivers ask of it.
pub trait Sources: SourceView {
    /// Records what a call asked of one source: its interest is refreshed (sources
    /// nobody asks for are forgotten after a few intervals) and a fetch starts when it
    /// is due, missing, asked to fetch now or behind.
    fn want(&self, interest: &Interest);

    /// Asks for `request` and reads it: [`Sources::want`] then [`SourceView::state`].
    /// For tools and tests that poll an engine directly.
    fn lookup(&self, request: &SourceRequest, interval: Duration) -> SourceState {
        self.want(&Interest::keep(request, interval));
        self.state(request, interval, None)
    }

    /// A push receiver heard that `repository` ([`repository::normalise`]d) changed:
    /// fetch every remote of it now. Returns how many remotes that is.
    fn pushed(&self, repository: &str) -> usize {
        let _ = repository;
        0
    }

    /// Adds this engine's metric families to the server's registry.
    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        let _ = registry;
    }
}

/// Where a "fetch now" request stands ([`SourceView::token`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// A fetch that started after the request was first made has finished: whatever
    /// `lookup` answers now is at least that fresh.
    Handled,
    /// That fetch is scheduled or running; ask again soon.
    Pending,
}

/// The annotation that asks for a fetch now, on a MonitoredService, an APIMock or a
/// configsync target: any new value (`kubectl annotate … "$(date +%s)" --overwrite`).
pub const REQUESTED_AT: &str = "sources.metahooks.io/requested-at";

/// No sources at all: every lookup is an error. For controllers that fetch nothing.
pub struct NoSources;

impl SourceView for NoSources {
    fn state(&self, _: &SourceRequest, _: Duration, _: Option<&Revision>) -> SourceState {
        SourceState {
            error: Some(FetchError::NoSourceEngine),
            ..SourceState::default()
        }
    }
}

impl Sources for NoSources {
    fn want(&self, _: &Interest) {}
}

/// Locks `mutex`, taking the data even when a thread panicked holding it: every value
/// the engine keeps under a lock is whole between statements, so a panic elsewhere is
/// no reason to stop serving.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod redaction_tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_credentials_query_secrets_or_fragments() {
        for (raw, shown) in [
            (
                "https://user:pw@git.example.com/a.git",
                "https://git.example.com/a.git",
            ),
            (
                "https://gitlab.example.com/api/v4/projects/1/repository/files/a.env/raw?private_token=glpat-x&ref=main",
                "https://gitlab.example.com/api/v4/projects/1/repository/files/a.env/raw?private_token=redacted&ref=main",
            ),
            (
                "https://bucket.s3.example.com/a.env?X-Amz-Credential=AKIA&X-Amz-Signature=abc#part",
                "https://bucket.s3.example.com/a.env?X-Amz-Credential=redacted&X-Amz-Signature=redacted",
            ),
            (
                "https://example.com/a.env?RAW=1&Path=x&flag",
                "https://example.com/a.env?RAW=1&Path=x&flag=",
            ),
            (
                "https://example.com/a.env#token=abc",
                "https://example.com/a.env",
            ),
            // Not a URL that parses: user-info and everything from the query on go.
            (
                "https://u:p@exa mple.com/x?token=abc",
                "https://exa mple.com/x",
            ),
        ] {
            assert_eq!(redact_url(raw), shown, "{raw}");
        }
    }

    #[test]
    fn a_metric_label_carries_no_query() {
        assert_eq!(
            remote_label("https://t:x@example.com/a.env?ref=main&token=abc"),
            "https://example.com/a.env"
        );
    }
}
