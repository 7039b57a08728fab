//! Reading files out of a fetched commit's tree: within the policy's size and count limits,
//! by the job's deadline, refusing symbolic links and submodules.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use git2::{ObjectType, Oid, Repository, TreeWalkMode, TreeWalkResult};

use super::Resolved;
use crate::policy::{Policy, check_repo_path};
use crate::{Content, FetchError, Snapshot};

/// Reads the files at `path` in `commit`, within the policy's limits and by `deadline`.
pub fn extract(
    resolved: &Resolved,
    path: &str,
    policy: &Policy,
    deadline: Instant,
) -> Result<Snapshot, FetchError> {
    let path = check_repo_path(path)?;
    let repo = Repository::open_bare(&resolved.repo_dir)
        .map_err(|e| cache_unreadable(format!("cannot open the repository: {e}")))?;
    let oid = Oid::from_str(&resolved.commit).map_err(|e| cache_unreadable(e.to_string()))?;
    let commit = repo
        .find_commit(oid)
        .map_err(|e| cache_unreadable(format!("commit {oid} vanished: {e}")))?;
    let revision = resolved.revision();
    let made_at = Some(commit.committer().when().seconds());
    let root = commit.tree().map_err(|e| cache_unreadable(e.to_string()))?;
    let limits = &policy.limits;
    if path.is_empty() {
        let files = read_tree(&repo, &root, "", limits, deadline)?;
        return Ok(Snapshot::new(revision, files, false, made_at));
    }
    let entry = root
        .get_path(Path::new(&path))
        .map_err(|_| FetchError::PathNotFound {
            path: path.clone(),
            revision: revision.clone(),
        })?;
    if let Some(refused) = refused_link(entry.filemode(), &path) {
        return Err(refused);
    }
    match entry.kind() {
        Some(ObjectType::Blob) => {
            let files = read_one(&repo, entry.id(), &path, limits.config_bytes)?;
            Ok(Snapshot::new(revision, files, true, made_at))
        }
        Some(ObjectType::Tree) => {
            let tree = repo
                .find_tree(entry.id())
                .map_err(|e| cache_unreadable(e.to_string()))?;
            let files = read_tree(&repo, &tree, &path, limits, deadline)?;
            Ok(Snapshot::new(revision, files, false, made_at))
        }
        _ => Err(FetchError::PathNotFound { path, revision }),
    }
}

/// Why an entry of mode `mode` at `path` is not read: a symbolic link is never followed,
/// and a submodule (a "gitlink", naming a commit of another repository) is refused by
/// name rather than left out without a word.
fn refused_link(mode: i32, path: &str) -> Option<FetchError> {
    let path = path.to_owned();
    match mode {
        SYMLINK_MODE => Some(FetchError::SymlinkRefused { path }),
        GITLINK_MODE => Some(FetchError::UnsupportedEntry { path }),
        _ => None,
    }
}

/// Git's file modes of a symbolic link and of a submodule (a "gitlink").
const SYMLINK_MODE: i32 = 0o120000;
const GITLINK_MODE: i32 = 0o160000;

pub(super) fn read_tree(
    repo: &Repository,
    tree: &git2::Tree<'_>,
    prefix: &str,
    limits: &crate::policy::SourceLimits,
    deadline: Instant,
) -> Result<BTreeMap<String, Content>, FetchError> {
    let max_bytes = limits.config_bytes;
    let found = list_blobs(tree, prefix, limits, deadline)?;
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
            .map_err(|e| cache_unreadable(e.to_string()))?;
        files.insert(name, Content::from_bytes(blob.content().to_vec()));
    }
    Ok(files)
}

/// A blob's size as its object header says, without inflating it.
pub(super) fn blob_size(repo: &Repository, id: Oid) -> Result<u64, FetchError> {
    let odb = repo
        .odb()
        .map_err(|e| cache_unreadable(format!("cannot open its object database: {e}")))?;
    let (size, _) = odb
        .read_header(id)
        .map_err(|e| cache_unreadable(format!("cannot read object {id}: {e}")))?;
    Ok(size as u64)
}

/// The blobs under `tree` (path relative to it, and id), walking within the limits:
/// entries (a "tree bomb" names trees many times over), files and the deadline; a
/// symbolic link refuses the whole read.
fn list_blobs(
    tree: &git2::Tree<'_>,
    prefix: &str,
    limits: &crate::policy::SourceLimits,
    deadline: Instant,
) -> Result<Vec<(String, Oid)>, FetchError> {
    let max_files = limits.files;
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
        let mode = entry.filemode();
        if mode != SYMLINK_MODE && mode != GITLINK_MODE && entry.kind() != Some(ObjectType::Blob) {
            return TreeWalkResult::Ok;
        }
        let relative = format!("{dir}{}", entry.name().unwrap_or_default());
        let full = || match prefix {
            "" => relative.clone(),
            prefix => format!("{prefix}/{relative}"),
        };
        if let Some(refused) = refused_link(mode, &full()) {
            failure = Some(refused);
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
    walked.map_err(|e| cache_unreadable(e.to_string()))?;
    Ok(found)
}

/// One file, named by the last segment of its path, refused over `max_bytes` before it
/// is inflated.
fn read_one(
    repo: &Repository,
    id: Oid,
    path: &str,
    max_bytes: u64,
) -> Result<BTreeMap<String, Content>, FetchError> {
    if blob_size(repo, id)? > max_bytes {
        return Err(FetchError::TooLarge {
            what: format!("file {path}"),
            limit: max_bytes,
        });
    }
    let blob = repo
        .find_blob(id)
        .map_err(|e| cache_unreadable(e.to_string()))?;
    let name = path.rsplit('/').next().unwrap_or(path).to_owned();
    Ok(BTreeMap::from([(
        name,
        Content::from_bytes(blob.content().to_vec()),
    )]))
}

/// The cache failed while a commit it holds was read.
fn cache_unreadable(detail: String) -> FetchError {
    FetchError::CacheUnreadable { detail }
}

/// Checks the signatures `keys` asks for on the resolved commit (and its tag).
///
/// # Errors
/// As [`crate::signature::verify`], or the cache cannot be read.
pub fn verify(
    resolved: &Resolved,
    keys: &crate::signature::TrustedKeys,
) -> Result<Vec<crate::signature::Signer>, FetchError> {
    let repo = Repository::open_bare(&resolved.repo_dir)
        .map_err(|e| cache_unreadable(format!("cannot open the repository: {e}")))?;
    let commit = Oid::from_str(&resolved.commit).map_err(|e| cache_unreadable(e.to_string()))?;
    let tag = match &resolved.tag {
        Some(id) => Some(Oid::from_str(id).map_err(|e| cache_unreadable(e.to_string()))?),
        None => None,
    };
    crate::signature::verify(
        &repo,
        commit,
        tag.map(|t| (t, resolved.display_ref.as_str())),
        keys,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree holding a file and a submodule (a gitlink: an entry naming a commit).
    fn tree_with_a_submodule(repo: &Repository) -> Oid {
        let blob = repo.blob(b"A=1\n").unwrap_or_else(|e| panic!("{e}"));
        let empty = repo
            .treebuilder(None)
            .and_then(|builder| builder.write())
            .unwrap_or_else(|e| panic!("{e}"));
        let who = git2::Signature::now("t", "t@example.com").unwrap_or_else(|e| panic!("{e}"));
        let tree = repo.find_tree(empty).unwrap_or_else(|e| panic!("{e}"));
        let commit = repo
            .commit(None, &who, &who, "c", &tree, &[])
            .unwrap_or_else(|e| panic!("{e}"));
        let mut builder = repo.treebuilder(None).unwrap_or_else(|e| panic!("{e}"));
        builder
            .insert("a.env", blob, 0o100644)
            .unwrap_or_else(|e| panic!("{e}"));
        builder
            .insert("vendored", commit, GITLINK_MODE)
            .unwrap_or_else(|e| panic!("{e}"));
        builder.write().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_submodule_is_refused_by_name_not_left_out() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let repo = Repository::init(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let tree = repo
            .find_tree(tree_with_a_submodule(&repo))
            .unwrap_or_else(|e| panic!("{e}"));
        let limits = crate::policy::SourceLimits::default();
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        let listed = list_blobs(&tree, "conf", &limits, deadline);
        assert_eq!(
            listed.err(),
            Some(FetchError::UnsupportedEntry {
                path: "conf/vendored".to_owned()
            })
        );
    }
}
