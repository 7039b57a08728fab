//! Which of two copies of a source is the newer one. Replicas fetch on their own, so
//! right after a push one may hold the new commit while another still holds the old
//! one; answers must never go backwards. The order comes from when the engine saw
//! things ([`SourceState::after_running`](crate::source::SourceState::after_running)):
//! a copy fetched after the engine first heard what runs is at least as new. Commit
//! dates are never compared: anyone who can push sets them, and a skewed clock does too.

/// True when what runs may be a newer state of the same ref than this server's `fresh`
/// copy (another replica fetched after this one): keep it, and refresh the copy.
/// `after_running` is the engine's verdict for `running`.
pub fn running_is_newer(fresh: &str, running: &str, after_running: bool) -> bool {
    fn reference(revision: &str) -> Option<&str> {
        revision.rsplit_once('@').map(|(r, _)| r)
    }
    running != fresh
        && reference(fresh).is_some()
        && reference(fresh) == reference(running)
        && !after_running
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_copy_fetched_before_what_runs_was_heard_of_yields() {
        assert!(running_is_newer("main@sha1:a", "main@sha1:b", false));
        assert!(!running_is_newer("main@sha1:a", "main@sha1:b", true));
        assert!(!running_is_newer("main@sha1:a", "main@sha1:a", false));
        // Another ref (the spec changed) or a source without refs: the fresh copy wins.
        assert!(!running_is_newer("v2@sha1:a", "main@sha1:b", false));
        assert!(!running_is_newer("sha256:aa", "sha256:bb", false));
    }
}
