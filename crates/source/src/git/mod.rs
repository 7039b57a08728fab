//! Git over libgit2 (blocking; run inside a fetch worker process, see
//! [`super::worker`]). A poll first
//! lists the remote's refs; only when the wanted commit is not already in the local bare
//! repository is a pack downloaded, shallow where the server allows. Files are read from
//! the commit's tree, never from a worktree, so nothing outside the repository can be
//! reached, and symbolic links are refused rather than followed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use git2::{Oid, Repository};

use super::connect_guard::Phase;
use super::policy::Policy;
use super::tag_range::TagRange;
use super::tls::TlsMaterial;
use super::{Credentials, FetchError};

mod read;
mod session;
mod smart_http;
pub use read::{extract, verify};
use session::*;

/// Where fetched refs land in the cache repository (one wanted ref, or all branches
/// when a commit id was asked for that no ref advertises).
const LOCAL_REF: &str = "refs/metahooks/one";
const LOCAL_ALL: &str = "refs/metahooks/all";

/// What a job fetches: the remote's HEAD, a named ref, or the highest tag in a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick<'a> {
    /// The remote's HEAD.
    Head,
    /// A branch, tag, full ref name or commit id.
    Named(&'a str),
    /// The highest tag whose version is in this semver range.
    Semver(&'a str),
}

impl<'a> Pick<'a> {
    /// From a job's fields: a range wins (the controllers refuse both set); an empty
    /// ref is the remote's HEAD.
    pub fn from_job(reference: Option<&'a str>, semver: Option<&'a str>) -> Pick<'a> {
        match (semver, reference.filter(|r| !r.is_empty())) {
            (Some(range), _) => Pick::Semver(range),
            (None, Some(reference)) => Pick::Named(reference),
            (None, None) => Pick::Head,
        }
    }

    /// As shown in messages.
    fn shown(self) -> String {
        match self {
            Pick::Head => "HEAD".to_owned(),
            Pick::Named(reference) => reference.to_owned(),
            Pick::Semver(range) => format!("semver {range}"),
        }
    }
}

/// The commit a reference resolved to, in the local cache repository.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Resolved {
    /// The cache repository holding the commit.
    pub repo_dir: PathBuf,
    /// The commit id.
    pub commit: String,
    /// The reference as shown in revisions: branch or tag name, or what the user wrote.
    pub display_ref: String,
    /// The annotated tag object the ref names, when it names one (signed tags are
    /// checked on it).
    #[serde(default)]
    pub tag: Option<String>,
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

/// Sets libgit2's process-wide network settings once, before any fetch of the process:
/// connect and read waits bounded (so a silent git:// or ssh server cannot hold a job
/// forever; the transfer callback only runs while data arrives), and http(s) spoken by
/// [`smart_http`].
#[allow(unsafe_code)]
fn configure_network() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: these write libgit2 process globals without synchronisation. The only
        // readers are libgit2 network operations, and every one of them in this program
        // starts in `fetch` after this `Once` has completed, so none runs concurrently.
        unsafe {
            let _ = git2::opts::set_server_connect_timeout_in_milliseconds(10_000);
            let _ = git2::opts::set_server_timeout_in_milliseconds(20_000);
            smart_http::register();
        }
    });
}

/// Where the bare repository for `url` fetched with `credentials` and `tls` lives under
/// `cache_dir`, named by a digest keyed with the cache's `key`. Each credential holder
/// (and client certificate) has a repository of its own: objects one holder's access
/// brought in are never served to another, whose own access the server may refuse.
pub fn repo_dir(
    cache_dir: &Path,
    url: &str,
    credentials: Option<&Credentials>,
    tls: Option<&TlsMaterial>,
    key: &[u8; 32],
) -> PathBuf {
    let holder = credentials.map(|c| c.fingerprint_with(key));
    let client = tls.map(TlsMaterial::fingerprint);
    let digest = metahooks_hash::Parts::keyed(key)
        .part(url.as_bytes())
        .optional(holder.as_deref().map(str::as_bytes))
        .optional(client.as_deref().map(str::as_bytes))
        .finish();
    cache_dir.join("git").join(hex::encode(&digest[..12]))
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
    pick: Pick<'_>,
    credentials: Option<&Credentials>,
    tls: Option<&TlsMaterial>,
    policy: &Policy,
    deadline: Instant,
) -> Result<Resolved, FetchError> {
    let parsed = checked_url(raw_url, credentials, tls, policy)?;
    let trust = SshTrust::for_url(&parsed, raw_url, credentials)?;
    configure_network();
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
    let Picked {
        commit,
        display: display_ref,
        fetch_ref: remote_ref,
        tag,
    } = {
        session.enter(Phase::Refs);
        let heads = session.list_heads(&repo)?;
        resolve(&heads, pick, &session.shown)?
    };
    let resolved = |commit: String, downloaded: bool, received_bytes: u64| Resolved {
        repo_dir: dir.clone(),
        commit,
        display_ref: display_ref.clone(),
        tag: tag.map(|t| t.to_string()),
        downloaded,
        received_bytes,
    };
    // A tag object is fetched with its ref; a commit reached before by a branch may lack it.
    let tag_here = tag.is_none_or(|t| repo.find_object(t, None).is_ok());
    if let Some(have) = commit_in(&repo, commit)?
        && tag_here
    {
        return Ok(resolved(have, false, 0));
    }
    let shallow = !matches!(parsed.scheme(), "file");
    session.enter(Phase::Pack);
    session.download(&repo, remote_ref.as_deref(), shallow)?;
    let not_found = || FetchError::RefNotFound {
        url: session.shown.clone(),
        reference: pick.shown(),
    };
    let commit_id = downloaded_commit(&repo, commit, not_found)?;
    Ok(resolved(commit_id, true, session.outcome.received.get()))
}

/// The URL, when the policy allows it and its host, and the Secret's owner allowed its
/// credentials and certificates to reach it.
fn checked_url(
    raw_url: &str,
    credentials: Option<&Credentials>,
    tls: Option<&TlsMaterial>,
    policy: &Policy,
) -> Result<url::Url, FetchError> {
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
    Ok(parsed)
}

/// The commit the download brought, as the commit id it peels to.
fn downloaded_commit(
    repo: &Repository,
    commit: Oid,
    not_found: impl FnOnce() -> FetchError,
) -> Result<String, FetchError> {
    let object = repo.find_object(commit, None).map_err(|_| not_found())?;
    Ok(object
        .peel_to_commit()
        .map_err(|e| FetchError::CacheUnreadable {
            detail: format!("commit {commit}: {e}"),
        })?
        .id()
        .to_string())
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
            FetchError::CacheUnreadable {
                detail: format!("cannot {doing} {}: {detail}", dir.display()),
            }
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

/// What a listing resolved the pick to.
#[derive(Debug, PartialEq, Eq)]
struct Picked {
    /// The commit.
    commit: Oid,
    /// The name shown in revisions.
    display: String,
    /// The ref to download (None: a commit id no ref advertises).
    fetch_ref: Option<String>,
    /// The annotated tag object the ref names, if it names one.
    tag: Option<Oid>,
}

impl Picked {
    fn plain(commit: Oid, display: String, fetch_ref: Option<String>) -> Picked {
        Picked {
            commit,
            display,
            fetch_ref,
            tag: None,
        }
    }

    /// A ref whose advertised object is `object`; an annotated tag when that is not the
    /// commit it peels to.
    fn tagged(object: Oid, commit: Oid, display: String, fetch_ref: String) -> Picked {
        Picked {
            commit,
            display,
            fetch_ref: Some(fetch_ref),
            tag: (object != commit).then_some(object),
        }
    }
}

/// Picks the advertised ref for what the user asked: remote HEAD, a branch, a tag
/// (peeled), a full ref name or a commit id. Returns (commit, display name, ref to fetch).
fn resolve(
    heads: &[(String, Oid, Option<String>)],
    pick: Pick<'_>,
    url: &str,
) -> Result<Picked, FetchError> {
    let find = |name: &str| heads.iter().find(|(n, ..)| n == name);
    // An annotated tag points at a tag object; the peeled entry names the commit.
    let peeled = |name: &str, oid: Oid| find(&format!("{name}^{{}}")).map_or(oid, |(_, p, _)| *p);
    let not_found = || FetchError::RefNotFound {
        url: url.to_owned(),
        reference: pick.shown(),
    };
    let reference = match pick {
        Pick::Head => {
            let (_, oid, target) = find("HEAD").ok_or_else(not_found)?;
            let display = target
                .as_deref()
                .map(|t| t.trim_start_matches("refs/heads/").to_owned())
                .unwrap_or_else(|| "HEAD".to_owned());
            let fetch_ref = target.clone().unwrap_or_else(|| "HEAD".to_owned());
            return Ok(Picked::plain(*oid, display, Some(fetch_ref)));
        }
        Pick::Semver(range) => {
            let parsed = TagRange::parse(range).map_err(|e| FetchError::RangeInvalid {
                range: range.to_owned(),
                problem: e.to_string(),
            })?;
            let tags = heads
                .iter()
                .filter_map(|(name, ..)| name.strip_prefix("refs/tags/"))
                .filter(|tag| !tag.ends_with("^{}"));
            let tag = parsed
                .highest(tags)
                .ok_or_else(|| FetchError::NoMatchingTag {
                    url: url.to_owned(),
                    range: range.to_owned(),
                })?;
            let name = format!("refs/tags/{tag}");
            let (_, oid, _) = find(&name).ok_or_else(not_found)?;
            return Ok(Picked::tagged(
                *oid,
                peeled(&name, *oid),
                tag.to_owned(),
                name,
            ));
        }
        Pick::Named(reference) => reference,
    };
    if reference.len() == 40 && reference.chars().all(|c| c.is_ascii_hexdigit()) {
        let oid = Oid::from_str(reference).map_err(|_| not_found())?;
        let advertised = heads
            .iter()
            .find(|(_, o, _)| *o == oid)
            .map(|(n, ..)| n.clone());
        return Ok(Picked::plain(oid, reference.to_owned(), advertised));
    }
    for candidate in [
        reference.to_owned(),
        format!("refs/heads/{reference}"),
        format!("refs/tags/{reference}"),
    ] {
        if let Some((name, oid, _)) = find(&candidate) {
            let commit = peeled(&candidate, *oid);
            return Ok(Picked::tagged(
                *oid,
                commit,
                reference.to_owned(),
                name.clone(),
            ));
        }
    }
    Err(not_found())
}

/// The folder a git worker gets as HOME: inside its repository's cache folder, so no
/// user's `~/.gitconfig` or `~/.ssh` is ever read, and what is written there is this
/// repository's alone.
pub fn worker_home(repo_dir: &Path) -> PathBuf {
    repo_dir.join("metahooks-home")
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
            resolve(&heads, Pick::Head, "u").unwrap(),
            Picked::plain(
                oid(1),
                "main".to_owned(),
                Some("refs/heads/main".to_owned())
            )
        );
        assert_eq!(
            resolve(&heads, Pick::Named("dev"), "u").unwrap().commit,
            oid(2)
        );
        assert_eq!(
            resolve(&heads, Pick::Named("v1"), "u").unwrap().commit,
            oid(4),
            "annotated tags are peeled"
        );
        let sha = oid(2).to_string();
        assert_eq!(
            resolve(&heads, Pick::Named(&sha), "u")
                .unwrap()
                .fetch_ref
                .as_deref(),
            Some("refs/heads/dev")
        );
        assert_eq!(
            resolve(&heads, Pick::Named("nope"), "u")
                .unwrap_err()
                .reason(),
            "RefNotFound"
        );
    }

    #[test]
    fn a_range_picks_its_highest_tag_peeled_and_names_it() {
        let heads = vec![
            ("refs/heads/main".to_owned(), oid(1), None),
            ("refs/tags/v1.2.0".to_owned(), oid(2), None),
            ("refs/tags/v1.4.1".to_owned(), oid(3), None),
            ("refs/tags/v1.4.1^{}".to_owned(), oid(4), None),
            ("refs/tags/v2.0.0".to_owned(), oid(5), None),
        ];
        assert_eq!(
            resolve(&heads, Pick::Semver(">=1.2.0 <2.0.0"), "u").unwrap(),
            Picked {
                commit: oid(4),
                display: "v1.4.1".to_owned(),
                fetch_ref: Some("refs/tags/v1.4.1".to_owned()),
                tag: Some(oid(3)),
            }
        );
        let none = resolve(&heads, Pick::Semver(">=3"), "u").unwrap_err();
        assert_eq!(none.reason(), "NoMatchingTag");
        assert!(none.to_string().contains("\">=3\""), "{none}");
        let bad = resolve(&heads, Pick::Semver("1.2 - 1.4"), "u").unwrap_err();
        assert_eq!(bad.reason(), "RangeInvalid");
        assert_eq!(Pick::from_job(Some(""), None), Pick::Head);
        assert_eq!(Pick::from_job(Some("main"), Some("^1")), Pick::Semver("^1"));
    }
}
