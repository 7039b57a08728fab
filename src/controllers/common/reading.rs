//! A controller's reads of the source engine during one call: answered from the engine's
//! view (nothing is scheduled while the call runs) and kept as what the answer depends on
//! and asks for. The registry hands them to the engine once the call has answered, and
//! the server keeps them with a remembered answer, which holds only while the engine
//! still holds what the call saw.

use crate::source::Revision;
use std::time::Duration;

use serde_json::Value;

use crate::source::{Interest, Refresh, Seen, SourceRequest, SourceState, SourceView};

/// One source a call used: what it asks of the engine, and what it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceUse {
    /// What the call asks for it.
    pub interest: Interest,
    /// The state the call read (None: it only asked to fetch now).
    pub seen: Option<Seen>,
    /// Where a "fetch now" token stood when the call read it.
    pub token: Option<Refresh>,
}

impl SourceUse {
    /// Whether `view` answers now what this use saw: an answer built from it still holds.
    pub fn still_holds(&self, view: &dyn SourceView) -> bool {
        let interest = &self.interest;
        let seen = self.seen.as_ref().is_none_or(|seen| {
            let state = view.state(
                &interest.request,
                interest.interval,
                interest.running.as_ref(),
            );
            state.seen() == *seen
        });
        let token = match (&interest.fetch_now, self.token) {
            (Some(token), Some(stood)) => view.token(&interest.request, token) == stood,
            _ => true,
        };
        seen && token
    }
}

/// The reads of one call.
pub struct Reads<'v> {
    view: &'v dyn SourceView,
    used: Vec<SourceUse>,
    /// The parent the reads are for (`namespace/name`), told to the engine.
    parent: Option<std::sync::Arc<str>>,
}

impl<'v> Reads<'v> {
    /// Reads through `view`.
    pub fn new(view: &'v dyn SourceView) -> Reads<'v> {
        Reads {
            view,
            used: Vec::new(),
            parent: None,
        }
    }

    /// The same, for the call of `parent`.
    pub fn for_parent(mut self, parent: &Value) -> Reads<'v> {
        let field = |pointer| {
            parent
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or("")
        };
        let key = format!(
            "{}/{}",
            field("/metadata/namespace"),
            field("/metadata/name")
        );
        self.parent = Some(key.into());
        self
    }

    /// What the engine holds for `request`, asking it to be kept fresh at `interval`;
    /// `running` is the revision the parent runs (read back from its ConfigMap).
    pub fn lookup(
        &mut self,
        request: &SourceRequest,
        interval: Duration,
        running: Option<&Revision>,
    ) -> SourceState {
        let state = self.view.state(request, interval, running);
        let used = self.use_of(request, interval);
        used.interest.running = running.cloned();
        used.seen = Some(state.seen());
        state
    }

    /// Where the "fetch now" `token` stands, asking for the fetch while it is not handled.
    pub fn fetch_now(
        &mut self,
        request: &SourceRequest,
        interval: Duration,
        token: &str,
    ) -> Refresh {
        let stood = self.view.token(request, token);
        let used = self.use_of(request, interval);
        used.token = Some(stood);
        if stood == Refresh::Pending {
            used.interest.fetch_now = Some(token.to_owned());
        }
        stood
    }

    /// What runs is newer than the engine's copy of `request`: asks it to fetch now.
    pub fn behind(&mut self, request: &SourceRequest) {
        let interval = self
            .used
            .iter()
            .find(|used| used.interest.request == *request)
            .map_or(Duration::ZERO, |used| used.interest.interval);
        self.use_of(request, interval).interest.behind = true;
    }

    /// Everything the call used, for its answer.
    pub fn finish(self) -> Vec<SourceUse> {
        self.used
    }

    /// The use of `request`, made on first use.
    fn use_of(&mut self, request: &SourceRequest, interval: Duration) -> &mut SourceUse {
        let index = match self
            .used
            .iter()
            .position(|used| used.interest.request == *request)
        {
            Some(index) => index,
            None => {
                let mut interest = Interest::keep(request, interval);
                interest.parent = self.parent.clone();
                self.used.push(SourceUse {
                    interest,
                    seen: None,
                    token: None,
                });
                self.used.len() - 1
            }
        };
        let used = &mut self.used[index];
        used.interest.interval = interval;
        used
    }
}
