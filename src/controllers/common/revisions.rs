//! Which of two copies of a source is the newer one. Replicas fetch on their own, so
//! right after a push one may hold the new commit while another still holds the old
//! one; answers must never go backwards. The decision uses only what every replica sees
//! alike (revisions and the source's own timestamps), so replicas holding the same
//! copy give the same answer.

/// A revision (`<ref>@sha1:<commit>` for git, `sha256:<hash>` for HTTP) and when the
/// source says it was made (the committer time for git; none for HTTP).
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The revision.
    pub revision: &'a str,
    /// When the source made it, if known.
    pub made_at: Option<i64>,
}

/// True when what runs is a newer state of the same ref than this server's fresh copy:
/// keep it, and refresh the copy.
pub fn running_is_newer(fresh: Seen<'_>, running: Seen<'_>) -> bool {
    fn reference(revision: &str) -> Option<&str> {
        revision.rsplit_once('@').map(|(r, _)| r)
    }
    running.revision != fresh.revision
        && reference(fresh.revision).is_some()
        && reference(fresh.revision) == reference(running.revision)
        && running
            .made_at
            .zip(fresh.made_at)
            .is_some_and(|(theirs, ours)| theirs > ours)
}
