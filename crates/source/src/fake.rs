//! Sources whose answers a test sets: controllers' fetch branches (pending, failed,
//! fresh, newer elsewhere) run without a git or HTTP server, and every source a call asks
//! for is noted.

use crate::Revision;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Content, FetchError, Interest, Snapshot, SourceRequest, SourceState, SourceView};
use super::{Sources, lock};

/// Answers by URL; a URL nobody set is pending (a fetch in progress), as a real engine
/// answers the first lookup of a remote.
#[derive(Default)]
pub struct FakeSources {
    states: Mutex<BTreeMap<String, SourceState>>,
    lookups: Mutex<Vec<(String, Duration)>>,
    /// Revisions another replica fetched after this engine's copy.
    ahead: Mutex<BTreeSet<String>>,
}

impl FakeSources {
    /// From now on, lookups of `url` answer `state`.
    pub fn set(&self, url: &str, state: SourceState) {
        lock(&self.states).insert(url.to_owned(), state);
    }

    /// `url` holds these files at `revision` (a directory unless `single_file`).
    pub fn serve(
        &self,
        url: &str,
        revision: &str,
        files: &[(&str, &str)],
        single_file: bool,
        made_at: Option<i64>,
    ) {
        self.set(
            url,
            SourceState {
                snapshot: Some(Arc::new(snapshot(revision, files, single_file, made_at))),
                error: None,
                pending: false,
                resync_within: None,
                after_running: true,
            },
        );
    }

    /// Another replica fetched `revision` after this engine's copy: a parent running it
    /// may run something newer than what this engine holds.
    pub fn ran_ahead(&self, revision: &str) {
        lock(&self.ahead).insert(revision.to_owned());
    }

    /// The latest fetch of `url` failed; what was fetched before stays.
    pub fn fail(&self, url: &str, error: FetchError) {
        let mut states = lock(&self.states);
        let state = states.entry(url.to_owned()).or_default();
        state.error = Some(error);
        state.pending = false;
    }

    /// A fetch of `url` starts (`true`) or ends having found nothing new (`false`), as
    /// a background poll does; what was fetched before stays.
    pub fn polling(&self, url: &str, running: bool) {
        lock(&self.states)
            .entry(url.to_owned())
            .or_default()
            .pending = running;
    }

    /// Every source asked for so far: the URL and the interval (zero for a fetch now
    /// because what runs is newer).
    pub fn lookups(&self) -> Vec<(String, Duration)> {
        lock(&self.lookups).clone()
    }
}

/// A snapshot of `files` (path, text) at `revision`.
pub fn snapshot(
    revision: &str,
    files: &[(&str, &str)],
    single_file: bool,
    made_at: Option<i64>,
) -> Snapshot {
    let files = files
        .iter()
        .map(|(path, text)| ((*path).to_owned(), Content::Text((*text).to_owned())))
        .collect();
    Snapshot::new(revision.to_owned(), files, single_file, made_at)
}

impl SourceView for FakeSources {
    fn state(
        &self,
        request: &SourceRequest,
        _: Duration,
        running: Option<&Revision>,
    ) -> SourceState {
        let mut state = lock(&self.states)
            .get(request.location.url())
            .cloned()
            .unwrap_or(SourceState {
                pending: true,
                ..SourceState::default()
            });
        state.after_running =
            running.is_none_or(|running| !lock(&self.ahead).contains(running.as_str()));
        state
    }
}

impl Sources for FakeSources {
    fn want(&self, interest: &Interest) {
        let mut lookups = lock(&self.lookups);
        let url = interest.request.location.url().to_owned();
        lookups.push((url.clone(), interest.interval));
        if interest.behind {
            lookups.push((url, Duration::ZERO));
        }
    }
}
