//! Git over libgit2 (blocking; run inside a fetch worker process, see
//! [`super::worker`]). A poll first
//! lists the remote's refs; only when the wanted commit is not already in the local bare
//! repository is a pack downloaded, shallow where the server allows. Files are read from
//! the commit's tree, never from a worktree, so nothing outside the repository can be
//! reached, and symbolic links are refused rather than followed.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use git2::{
    AutotagOption, CertificateCheckStatus, Cred, CredentialType, Direction, ErrorClass, ErrorCode,
    FetchOptions, ObjectType, Oid, ProxyOptions, RemoteCallbacks, Repository, TreeWalkMode,
    TreeWalkResult,
};

use super::connect_guard::{ConnectGuard, Phase};
use super::known_hosts::KnownHosts;
use super::policy::{Policy, check_repo_path};
use super::tls::TlsMaterial;
use super::{Content, Credentials, FetchError, Snapshot};

/// Where fetched refs land in the cache repository (one wanted ref, or all branches
/// when a commit id was asked for that no ref advertises).
const LOCAL_REF: &str = "refs/metahooks/one";
const LOCAL_ALL: &str = "refs/metahooks/all";

/// The commit a reference resolved to, in the local cache repository.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Resolved {
    /// The cache repository holding the commit.
    pub repo_dir: PathBuf,
    /// The commit id.
    pub commit: String,
    /// The reference as shown in revisions: branch or tag name, or what the user wrote.
    pub display_ref: String,
    /// Whether a pack was downloaded (false when the commit was already here).
    pub downloaded: bool,
    /// Bytes downloaded for it (0 when nothing was).
    pub received_bytes: u64,
}

impl Resolved {
    /// The revision shown for snapshots of this commit.
    pub fn revision(&self) -> String {
        format!("{}@sha1:{}", self.display_ref, self.commit)
    }
}

/// Bounds libgit2's connect and read waits, so a silent server cannot hold a fetch job
/// forever (the transfer callback only runs while data arrives). Done on first use, not
/// at start-up: initialising libgit2 loads the system CA bundle (~40 ms), which would
/// double the time to readiness.
#[allow(unsafe_code)]
fn set_network_timeouts() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: these write libgit2 process globals without synchronisation. The only
        // readers are libgit2 network operations, and every one of them in this program
        // starts in `fetch` after this `Once` has completed, so none runs concurrently.
        unsafe {
            let _ = git2::opts::set_server_connect_timeout_in_milliseconds(10_000);
            let _ = git2::opts::set_server_timeout_in_milliseconds(20_000);
        }
    });
}

/// Where the bare repository for `url` fetched with credentials of `fingerprint` ("" for
/// none) lives under `cache_dir`. Each credential holder has a repository of its own:
/// objects one holder's access brought in are never served to another, whose own
/// access the server may refuse.
pub fn repo_dir(cache_dir: &Path, url: &str, fingerprint: &str) -> PathBuf {
    let mut keyed = Vec::with_capacity(url.len() + fingerprint.len() + 1);
    keyed.extend_from_slice(url.as_bytes());
    keyed.push(0);
    keyed.extend_from_slice(fingerprint.as_bytes());
    let digest = crate::hash::sha256_hex(&keyed);
    cache_dir.join("git").join(&digest[..24])
}

/// When a fetch job must be done by: the policy's time limit from now. The same instant
/// bounds the download and the reading of the files (`extract`).
pub fn deadline(policy: &Policy) -> Instant {
    Instant::now() + Duration::from_secs(policy.limits.timeout_seconds)
}

/// Resolves `reference` on the remote and makes sure its commit is in the local cache:
/// check the URL and host → connect through the guard → list the remote's refs →
/// download the commit unless the cache already holds it.
pub fn fetch(
    dir: &Path,
    raw_url: &str,
    reference: Option<&str>,
    credentials: Option<&Credentials>,
    tls: Option<&TlsMaterial>,
    policy: &Policy,
    deadline: Instant,
) -> Result<Resolved, FetchError> {
    let parsed = policy
        .check_url(raw_url)
        .map_err(|e| redact_error(e, raw_url))?;
    if let Some(credentials) = credentials {
        credentials.check_url(raw_url)?;
    }
    if let Some(tls) = tls {
        tls.check_url(raw_url)?;
    }
    policy.check_host(&parsed)?;
    let trust = SshTrust::for_url(&parsed, raw_url, credentials)?;
    set_network_timeouts();
    let dir = dir.to_owned();
    let repo = open_or_init(&dir, raw_url)?;
    let session = Session::connect(
        &parsed,
        raw_url,
        Secrets {
            credentials,
            tls,
            ssh: trust,
        },
        policy,
        deadline,
    )?;
    session.teach_libssh2(&dir);
    let (commit, display_ref, remote_ref) = {
        session.enter(Phase::Refs);
        let heads = session.list_heads(&repo)?;
        resolve(&heads, reference, &session.shown)?
    };
    let resolved = |commit: String, downloaded: bool, received_bytes: u64| Resolved {
        repo_dir: dir.clone(),
        commit,
        display_ref: display_ref.clone(),
        downloaded,
        received_bytes,
    };
    if let Some(have) = commit_in(&repo, commit)? {
        return Ok(resolved(have, false, 0));
    }
    let shallow = !matches!(parsed.scheme(), "file");
    session.enter(Phase::Pack);
    session.download(&repo, remote_ref.as_deref(), shallow)?;
    let object = repo
        .find_object(commit, None)
        .map_err(|_| FetchError::RefNotFound {
            url: session.shown.clone(),
            reference: reference.unwrap_or("HEAD").to_owned(),
        })?;
    let commit_id = object
        .peel_to_commit()
        .map_err(|e| FetchError::Other(e.to_string()))?
        .id()
        .to_string();
    Ok(resolved(commit_id, true, session.outcome.received.get()))
}

/// The commit's id when the cache already holds it.
fn commit_in(repo: &Repository, commit: Oid) -> Result<Option<String>, FetchError> {
    let Ok(object) = repo.find_object(commit, None) else {
        return Ok(None);
    };
    match object.peel_to_commit() {
        Ok(found) => Ok(Some(found.id().to_string())),
        Err(_) => Ok(None),
    }
}

/// What an ssh fetch trusts: the Secret's known_hosts, for the host and port the URL
/// names (not the guard's loopback address libgit2 connects to).
struct SshTrust {
    known: KnownHosts,
    host: String,
    port: u16,
    secret: String,
}

impl SshTrust {
    /// None for other schemes; for ssh, the Secret's known_hosts or why there is none.
    fn for_url(
        parsed: &url::Url,
        raw_url: &str,
        credentials: Option<&Credentials>,
    ) -> Result<Option<SshTrust>, FetchError> {
        if parsed.scheme() != "ssh" {
            return Ok(None);
        }
        let shown = super::redact_url(raw_url);
        let Some((credentials, text)) =
            credentials.and_then(|c| c.known_hosts.as_deref().map(|text| (c, text)))
        else {
            return Err(FetchError::KnownHostsMissing { url: shown });
        };
        let known = KnownHosts::parse(text).map_err(|detail| FetchError::HostKeyMismatch {
            url: shown.clone(),
            detail: format!("Secret {:?}: {detail}", credentials.secret),
        })?;
        Ok(Some(SshTrust {
            known,
            host: parsed.host_str().unwrap_or_default().to_owned(),
            port: parsed.port().unwrap_or(22),
            secret: credentials.secret.clone(),
        }))
    }
}

/// What a fetch may present or trust beyond the defaults.
struct Secrets<'a> {
    credentials: Option<&'a Credentials>,
    tls: Option<&'a TlsMaterial>,
    ssh: Option<SshTrust>,
}

/// One fetch's way to the remote: the URL libgit2 is given (through the connect guard
/// for every network scheme), credentials and bounds.
struct Session<'a> {
    /// The URL as people see it (conditions, events, logs): without user-info.
    shown: String,
    remote_url: String,
    guard: Option<ConnectGuard>,
    credentials: Option<&'a Credentials>,
    ssh: Option<SshTrust>,
    policy: &'a Policy,
    deadline: Instant,
    outcome: Outcome,
}

impl<'a> Session<'a> {
    fn connect(
        parsed: &url::Url,
        raw_url: &str,
        secrets: Secrets<'a>,
        policy: &'a Policy,
        deadline: Instant,
    ) -> Result<Session<'a>, FetchError> {
        let Secrets {
            credentials,
            tls,
            ssh,
        } = secrets;
        // https is spoken by the guard (rustls, with the CAs and client certificate of
        // the source); libgit2 talks plain http to it on loopback.
        let tls_config = match parsed.scheme() {
            "https" => Some(super::tls::client_config(
                policy.source_ca_pem.as_deref(),
                tls,
            )?),
            _ => None,
        };
        // Every connection libgit2 makes (redirects included) goes through a guard that
        // connects only to checked addresses and counts what the remote sends.
        let guard = match parsed.scheme() {
            "http" | "https" | "git" | "ssh" => {
                Some(ConnectGuard::start(policy, parsed, deadline, tls_config)?)
            }
            _ => None,
        };
        let remote_url = match &guard {
            Some(guard) => guard.remote_url(parsed, raw_url),
            None => raw_url.to_owned(),
        };
        Ok(Session {
            shown: super::redact_url(raw_url),
            remote_url,
            guard,
            credentials,
            ssh,
            policy,
            deadline,
            outcome: Outcome::default(),
        })
    }

    /// libssh2 asks the server for the host-key types it finds in `~/.ssh/known_hosts`
    /// for the address it connects to (the guard's). A worker's HOME is a folder of its
    /// repository's own ([`worker_home`]); the trusted keys are written there under the
    /// guard's address, so a server with several keys shows one the Secret lists. Who
    /// decides trust is still the certificate callback, against the original host name.
    fn teach_libssh2(&self, repo_dir: &Path) {
        let (Some(trust), Some(guard)) = (&self.ssh, &self.guard) else {
            return;
        };
        let home = worker_home(repo_dir);
        if std::env::var_os("HOME").map(PathBuf::from) != Some(home.clone()) {
            return; // not in a worker (the engine's in-process tests): leave HOME alone
        }
        let alias = format!("[{}]:{}", guard.address().ip(), guard.address().port());
        let lines = trust.known.lines_for(&trust.host, trust.port, &alias);
        let ssh_dir = home.join(".ssh");
        let _ = std::fs::create_dir_all(&ssh_dir)
            .and_then(|()| std::fs::write(ssh_dir.join("known_hosts"), lines));
    }

    fn enter(&self, phase: Phase) {
        if let Some(guard) = &self.guard {
            guard.enter(phase);
        }
    }

    /// No proxy, ever: environment proxies would connect past the address policy, and
    /// the guard stands in for the origin itself.
    fn proxy(&self) -> ProxyOptions<'static> {
        ProxyOptions::new()
    }

    /// What went wrong: the guard's refusal when it refused a connection, else what
    /// libgit2 and the transfer bounds say.
    fn fail(&self, error: git2::Error) -> FetchError {
        self.guard
            .as_ref()
            .and_then(ConnectGuard::refusal)
            .unwrap_or_else(|| map_error(error, &self.shown, &self.outcome, self.policy))
    }

    /// The remote's refs: (name, commit, symbolic target).
    fn list_heads(
        &self,
        repo: &Repository,
    ) -> Result<Vec<(String, Oid, Option<String>)>, FetchError> {
        let mut remote = repo
            .remote_anonymous(&self.remote_url)
            .map_err(|e| self.fail(e))?;
        let connection = remote
            .connect_auth(Direction::Fetch, Some(callbacks(self)), Some(self.proxy()))
            .map_err(|e| self.fail(e))?;
        let heads = connection
            .list()
            .map_err(|e| self.fail(e))?
            .iter()
            .map(|h| {
                (
                    h.name().to_owned(),
                    h.oid(),
                    h.symref_target().map(str::to_owned),
                )
            })
            .collect();
        Ok(heads)
    }

    /// Downloads the wanted ref (shallow where the transport allows), or every branch
    /// when a commit was asked for that no ref advertises.
    fn download(
        &self,
        repo: &Repository,
        remote_ref: Option<&str>,
        shallow: bool,
    ) -> Result<(), FetchError> {
        let mut remote = repo
            .remote_anonymous(&self.remote_url)
            .map_err(|e| self.fail(e))?;
        let mut options = FetchOptions::new();
        options.remote_callbacks(callbacks(self));
        options.proxy_options(self.proxy());
        options.download_tags(AutotagOption::None);
        let refspec = match remote_ref {
            Some(name) => format!("+{name}:{LOCAL_REF}"),
            None => format!("+refs/heads/*:{LOCAL_ALL}/*"),
        };
        if remote_ref.is_some() && shallow {
            options.depth(1);
        } else if remote_ref.is_none() && repo.is_shallow() {
            // A commit no ref advertises lies somewhere in history, and an earlier
            // shallow fetch for a branch cut that history off: ask for all of it.
            options.depth(i32::MAX);
        }
        remote
            .fetch(&[refspec.as_str()], Some(&mut options), None)
            .map_err(|e| self.fail(e))
    }
}

/// A policy refusal names the URL; shown without its user-info.
fn redact_error(error: FetchError, raw_url: &str) -> FetchError {
    match error {
        FetchError::InvalidUrl { problem, .. } => FetchError::InvalidUrl {
            url: super::redact_url(raw_url),
            problem,
        },
        other => other,
    }
}

fn open_or_init(dir: &Path, url: &str) -> Result<Repository, FetchError> {
    let cache_error = |doing: &str, detail: String| {
        if is_disk_full(&detail) {
            FetchError::CacheFull {
                url: super::redact_url(url),
                detail,
            }
        } else {
            FetchError::Other(format!(
                "cannot {doing} the cache at {}: {detail}",
                dir.display()
            ))
        }
    };
    if dir.join("HEAD").exists() {
        remove_leftovers(dir);
        return Repository::open_bare(dir).map_err(|e| cache_error("open", e.to_string()));
    }
    std::fs::create_dir_all(dir).map_err(|e| cache_error("create", e.to_string()))?;
    Repository::init_bare(dir).map_err(|e| cache_error("create", e.to_string()))
}

/// Lock files and half-written packs left by a fetch that was killed (at its deadline or
/// its memory limit) or by a crash. They are stale by construction: the fetcher runs one
/// job per repository at a time, and this one holds it. Left alone, a `shallow.lock` or
/// a ref's `.lock` fails every later fetch of the repository.
pub fn remove_leftovers(dir: &Path) {
    fn walk(dir: &Path, depth: usize) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() && depth < 8 && name != "objects" {
                walk(&path, depth + 1);
            } else if kind.is_file() && name.ends_with(".lock") {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    walk(dir, 0);
    if let Ok(entries) = std::fs::read_dir(dir.join("objects").join("pack")) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            // libgit2's indexer writes `pack_git2_*` and renames it when the pack is whole.
            if name.starts_with("pack_git2_") || name.starts_with("tmp_") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

fn is_disk_full(detail: &str) -> bool {
    detail.contains("No space left on device") || detail.contains("os error 28")
}

/// Picks the advertised ref for what the user asked: remote HEAD, a branch, a tag
/// (peeled), a full ref name or a commit id. Returns (commit, display name, ref to fetch).
fn resolve(
    heads: &[(String, Oid, Option<String>)],
    reference: Option<&str>,
    url: &str,
) -> Result<(Oid, String, Option<String>), FetchError> {
    let find = |name: &str| heads.iter().find(|(n, ..)| n == name);
    let not_found = || FetchError::RefNotFound {
        url: url.to_owned(),
        reference: reference.unwrap_or("HEAD").to_owned(),
    };
    let Some(reference) = reference.filter(|r| !r.is_empty()) else {
        let (_, oid, target) = find("HEAD").ok_or_else(not_found)?;
        let display = target
            .as_deref()
            .map(|t| t.trim_start_matches("refs/heads/").to_owned())
            .unwrap_or_else(|| "HEAD".to_owned());
        let fetch_ref = target.clone().unwrap_or_else(|| "HEAD".to_owned());
        return Ok((*oid, display, Some(fetch_ref)));
    };
    if reference.len() == 40 && reference.chars().all(|c| c.is_ascii_hexdigit()) {
        let oid = Oid::from_str(reference).map_err(|_| not_found())?;
        let advertised = heads
            .iter()
            .find(|(_, o, _)| *o == oid)
            .map(|(n, ..)| n.clone());
        return Ok((oid, reference.to_owned(), advertised));
    }
    for candidate in [
        reference.to_owned(),
        format!("refs/heads/{reference}"),
        format!("refs/tags/{reference}"),
    ] {
        if let Some((name, oid, _)) = find(&candidate) {
            // An annotated tag points at a tag object; the peeled entry names the commit.
            let commit = find(&format!("{candidate}^{{}}")).map_or(*oid, |(_, peeled, _)| *peeled);
            return Ok((commit, reference.to_owned(), Some(name.clone())));
        }
    }
    Err(not_found())
}

#[derive(Default)]
struct Outcome {
    received: Cell<u64>,
    too_large: Cell<bool>,
    timed_out: Cell<bool>,
    /// Our credentials were offered and the server still asked again.
    auth_rejected: Cell<bool>,
    /// Why the ssh host key was not trusted.
    distrust: RefCell<Option<String>>,
}

/// The folder a git worker gets as HOME: inside its repository's cache folder, so no
/// user's `~/.gitconfig` or `~/.ssh` is ever read, and what is written there is this
/// repository's alone.
pub fn worker_home(repo_dir: &Path) -> PathBuf {
    repo_dir.join("metahooks-home")
}

fn callbacks<'a>(session: &'a Session<'a>) -> RemoteCallbacks<'a> {
    let (credentials, deadline, policy, outcome) = (
        session.credentials,
        session.deadline,
        session.policy,
        &session.outcome,
    );
    let mut callbacks = RemoteCallbacks::new();
    let ssh = session.ssh.as_ref();
    callbacks.certificate_check(move |cert, _| {
        // https: libgit2's own verification decides (TLS is end to end).
        let Some(trust) = ssh else {
            return Ok(CertificateCheckStatus::CertificatePassthrough);
        };
        let verdict = match cert.as_hostkey().and_then(|key| key.hostkey()) {
            Some(key) => trust
                .known
                .check(&trust.host, trust.port, key)
                .map_err(|distrust| distrust.explain(&trust.host, trust.port, &trust.secret)),
            None => Err("the server's host key could not be read".to_owned()),
        };
        match verdict {
            Ok(()) => Ok(CertificateCheckStatus::CertificateOk),
            Err(why) => {
                outcome.distrust.replace(Some(why));
                Err(git2::Error::new(
                    ErrorCode::Certificate,
                    ErrorClass::Ssh,
                    "host key not trusted",
                ))
            }
        }
    });
    let limit = policy.limits.download_bytes;
    callbacks.transfer_progress(move |progress| {
        let received = u64::try_from(progress.received_bytes()).unwrap_or(u64::MAX);
        outcome.received.set(received);
        if received > limit {
            outcome.too_large.set(true);
            return false;
        }
        if Instant::now() > deadline {
            outcome.timed_out.set(true);
            return false;
        }
        true
    });
    // libgit2 asks again after every rejection; offering once per connection avoids a loop.
    let attempts = Cell::new(0_u32);
    callbacks.credentials(move |_url, user_from_url, allowed| {
        let user = user_from_url.unwrap_or("git");
        if allowed.contains(CredentialType::USERNAME) {
            return Cred::username(user);
        }
        attempts.set(attempts.get() + 1);
        let offered = match credentials {
            Some(credentials) if attempts.get() == 1 => offer(credentials, user, allowed),
            _ => None,
        };
        offered.unwrap_or_else(|| {
            outcome.auth_rejected.set(true);
            Err(git2::Error::new(
                ErrorCode::Auth,
                ErrorClass::Http,
                "authentication failed",
            ))
        })
    });
    callbacks
}

/// The credential the server's `allowed` kinds take: an SSH key (ssh), else user and
/// password (https, or ssh password authentication).
fn offer(
    credentials: &Credentials,
    user: &str,
    allowed: CredentialType,
) -> Option<Result<Cred, git2::Error>> {
    if allowed.contains(CredentialType::SSH_KEY)
        && let Some(identity) = &credentials.identity
    {
        // Secret values lose their trailing newline when read; PEM parsers want it back.
        let key = format!("{}\n", identity.trim_end());
        return Some(Cred::ssh_key_from_memory(
            user,
            None,
            &key,
            credentials.password.as_deref(),
        ));
    }
    if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
        let (user, secret) = credentials.userpass()?;
        return Some(Cred::userpass_plaintext(&user, &secret));
    }
    None
}

fn map_error(error: git2::Error, url: &str, outcome: &Outcome, policy: &Policy) -> FetchError {
    if let Some(detail) = outcome.distrust.borrow().clone() {
        return FetchError::HostKeyMismatch {
            url: url.to_owned(),
            detail,
        };
    }
    if outcome.too_large.get() {
        return FetchError::TooLarge {
            what: format!("the download from {url}"),
            limit: policy.limits.download_bytes,
        };
    }
    if outcome.timed_out.get() {
        return FetchError::Timeout {
            url: url.to_owned(),
            seconds: policy.limits.timeout_seconds,
        };
    }
    let message = error.message().to_owned();
    if is_disk_full(&message) {
        return FetchError::CacheFull {
            url: url.to_owned(),
            detail: message,
        };
    }
    if error.class() == ErrorClass::NoMemory {
        // The worker's address-space limit; the worker names its size.
        return FetchError::MemoryLimit {
            url: url.to_owned(),
            limit_mib: 0,
        };
    }
    if error.class() == ErrorClass::Ssh && message.contains("private key") {
        return FetchError::IdentityInvalid {
            url: url.to_owned(),
            detail: message,
        };
    }
    if error.code() == ErrorCode::Auth
        || outcome.auth_rejected.get()
        || message.contains("401")
        || message.contains("403")
    {
        return FetchError::AuthFailed {
            url: url.to_owned(),
        };
    }
    match error.class() {
        ErrorClass::Net | ErrorClass::Http | ErrorClass::Ssl | ErrorClass::Os | ErrorClass::Ssh => {
            FetchError::Unreachable {
                url: url.to_owned(),
                detail: message,
            }
        }
        _ => FetchError::Other(format!("git error for {url}: {message}")),
    }
}

/// Reads the files at `path` in `commit`, within the policy's limits and by `deadline`.
pub fn extract(
    resolved: &Resolved,
    path: &str,
    policy: &Policy,
    deadline: Instant,
) -> Result<Snapshot, FetchError> {
    let path = check_repo_path(path)?;
    let repo = Repository::open_bare(&resolved.repo_dir)
        .map_err(|e| FetchError::Other(format!("cannot open the cache: {e}")))?;
    let oid = Oid::from_str(&resolved.commit).map_err(|e| FetchError::Other(e.to_string()))?;
    let commit = repo
        .find_commit(oid)
        .map_err(|e| FetchError::Other(format!("commit {oid} vanished from the cache: {e}")))?;
    let revision = resolved.revision();
    let made_at = Some(commit.committer().when().seconds());
    let root = commit
        .tree()
        .map_err(|e| FetchError::Other(e.to_string()))?;
    let limits = &policy.limits;
    if path.is_empty() {
        let files = read_tree(&repo, &root, "", limits, deadline)?;
        return Ok(Snapshot {
            revision,
            files,
            single_file: false,
            made_at,
        });
    }
    let entry = root
        .get_path(Path::new(&path))
        .map_err(|_| FetchError::PathNotFound {
            path: path.clone(),
            revision: revision.clone(),
        })?;
    if entry.filemode() == 0o120000 {
        return Err(FetchError::SymlinkRefused { path });
    }
    match entry.kind() {
        Some(ObjectType::Blob) => {
            if blob_size(&repo, entry.id())? > limits.config_bytes {
                return Err(FetchError::TooLarge {
                    what: format!("file {path}"),
                    limit: limits.config_bytes,
                });
            }
            let blob = repo
                .find_blob(entry.id())
                .map_err(|e| FetchError::Other(e.to_string()))?;
            let name = path.rsplit('/').next().unwrap_or(&path).to_owned();
            Ok(Snapshot {
                revision,
                files: BTreeMap::from([(name, Content::from_bytes(blob.content().to_vec()))]),
                single_file: true,
                made_at,
            })
        }
        Some(ObjectType::Tree) => {
            let tree = repo
                .find_tree(entry.id())
                .map_err(|e| FetchError::Other(e.to_string()))?;
            let files = read_tree(&repo, &tree, &path, limits, deadline)?;
            Ok(Snapshot {
                revision,
                files,
                single_file: false,
                made_at,
            })
        }
        _ => Err(FetchError::PathNotFound { path, revision }),
    }
}

fn read_tree(
    repo: &Repository,
    tree: &git2::Tree<'_>,
    prefix: &str,
    limits: &super::policy::SourceLimits,
    deadline: Instant,
) -> Result<BTreeMap<String, Content>, FetchError> {
    let (max_files, max_bytes) = (limits.files, limits.config_bytes);
    let mut found = Vec::new();
    let mut failure = None;
    // Every entry walked counts, directories included: trees that name each other many
    // times over (a "tree bomb") are tiny on the wire and endless to walk.
    let mut entries: usize = 0;
    let walked = tree.walk(TreeWalkMode::PreOrder, |dir, entry| {
        entries += 1;
        if entries > limits.tree_entries {
            failure = Some(FetchError::TooManyEntries {
                limit: limits.tree_entries,
            });
            return TreeWalkResult::Abort;
        }
        if entries.is_multiple_of(64) && Instant::now() > deadline {
            failure = Some(FetchError::Timeout {
                url: "reading the repository tree".to_owned(),
                seconds: limits.timeout_seconds,
            });
            return TreeWalkResult::Abort;
        }
        if entry.kind() != Some(ObjectType::Blob) {
            return TreeWalkResult::Ok;
        }
        let relative = format!("{dir}{}", entry.name().unwrap_or_default());
        if entry.filemode() == 0o120000 {
            let full = if prefix.is_empty() {
                relative
            } else {
                format!("{prefix}/{relative}")
            };
            failure = Some(FetchError::SymlinkRefused { path: full });
            return TreeWalkResult::Abort;
        }
        if found.len() >= max_files {
            failure = Some(FetchError::TooManyFiles { limit: max_files });
            return TreeWalkResult::Abort;
        }
        found.push((relative, entry.id()));
        TreeWalkResult::Ok
    });
    if let Some(failure) = failure {
        return Err(failure);
    }
    walked.map_err(|e| FetchError::Other(e.to_string()))?;
    let mut files = BTreeMap::new();
    let mut total: u64 = 0;
    for (_, id) in &found {
        let id = *id;
        // Sizes come from the object headers, so a blob that inflates to a gigabyte is
        // refused before a byte of it is inflated.
        total += blob_size(repo, id)?;
        if total > max_bytes {
            return Err(FetchError::TooLarge {
                what: format!(
                    "the files under {:?}",
                    if prefix.is_empty() { "/" } else { prefix }
                ),
                limit: max_bytes,
            });
        }
    }
    for (name, id) in found {
        let blob = repo
            .find_blob(id)
            .map_err(|e| FetchError::Other(e.to_string()))?;
        files.insert(name, Content::from_bytes(blob.content().to_vec()));
    }
    Ok(files)
}

/// A blob's size as its object header says, without inflating it.
fn blob_size(repo: &Repository, id: Oid) -> Result<u64, FetchError> {
    let odb = repo
        .odb()
        .map_err(|e| FetchError::Other(format!("cannot read the cache: {e}")))?;
    let (size, _) = odb
        .read_header(id)
        .map_err(|e| FetchError::Other(format!("cannot read object {id}: {e}")))?;
    Ok(size as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oid(n: u8) -> Oid {
        Oid::from_bytes(&[n; 20]).unwrap()
    }

    #[test]
    fn resolves_head_branches_tags_and_commits() {
        let heads = vec![
            (
                "HEAD".to_owned(),
                oid(1),
                Some("refs/heads/main".to_owned()),
            ),
            ("refs/heads/main".to_owned(), oid(1), None),
            ("refs/heads/dev".to_owned(), oid(2), None),
            ("refs/tags/v1".to_owned(), oid(3), None),
            ("refs/tags/v1^{}".to_owned(), oid(4), None),
        ];
        assert_eq!(
            resolve(&heads, None, "u").unwrap(),
            (
                oid(1),
                "main".to_owned(),
                Some("refs/heads/main".to_owned())
            )
        );
        assert_eq!(resolve(&heads, Some("dev"), "u").unwrap().0, oid(2));
        assert_eq!(
            resolve(&heads, Some("v1"), "u").unwrap().0,
            oid(4),
            "annotated tags are peeled"
        );
        let sha = oid(2).to_string();
        assert_eq!(
            resolve(&heads, Some(&sha), "u").unwrap().2.as_deref(),
            Some("refs/heads/dev")
        );
        assert_eq!(
            resolve(&heads, Some("nope"), "u").unwrap_err().reason(),
            "RefNotFound"
        );
    }
}
