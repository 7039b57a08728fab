//! The controllers metahooks serves, and the seam that plugs one into the server.
//!
//! A controller is pure logic: it gets a parsed Metacontroller request plus a
//! [`Context`] (the clock reading, a read-only view of the sources, the server's memo of
//! expensive steps) and returns a response with what it read and wants of the sources
//! ([`Answer`]). It never does I/O, starts nothing and keeps no memo. Adding a controller
//! is one module here and one line in [`Registry::standard`].

pub mod apimock;
pub mod common;
pub mod configsync;
#[cfg(test)]
mod fixtures;
pub mod monitoredservice;

mod registry;
mod requeue;

use std::sync::Arc;

use serde_json::Value;

use self::common::reading::SourceUse;
pub use self::registry::{CallOutcome, Changes, Registry, parse_request};
pub use self::requeue::Requeue;
use crate::error::HookError;
use crate::memo::steps::Steps;
use crate::protocol::{
    CompositeRequest, CompositeResponse, CustomizeRequest, CustomizeResponse, DecoratorRequest,
    DecoratorResponse,
};
use crate::source::{NoSources, SourceView};

/// Server-wide settings controllers read (from `serve`/`render` flags).
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    /// Image of the mock-server container (`--mock-image`).
    pub mock_image: String,
    /// Image of the Swagger UI container (`--docs-image`).
    pub docs_image: String,
    /// What CRs may expose through their children (`--ingress-host`, …).
    pub policy: common::policy::ExposurePolicy,
    /// Steps on large inputs (validating a large definition) run at once (`serve` passes
    /// its compute threads; 0: one per core, at most 8).
    pub heavy_validations: usize,
    /// Bytes of remembered steps at most (`--step-memo-bytes`).
    pub step_memo_bytes: u64,
}

impl Default for ControllerSettings {
    fn default() -> ControllerSettings {
        ControllerSettings {
            mock_image: apimock::DEFAULT_MOCK_IMAGE.to_owned(),
            docs_image: apimock::DEFAULT_DOCS_IMAGE.to_owned(),
            policy: common::policy::ExposurePolicy::default(),
            heavy_validations: 0,
            step_memo_bytes: crate::memo::steps::DEFAULT_BYTES,
        }
    }
}

/// What a controller may know besides the request. Filled by the server per call.
#[derive(Clone)]
pub struct Context {
    /// The time to stamp on conditions that appear or flip in this answer.
    pub now: jiff::Timestamp,
    /// What the source engine holds (read-only; never blocks, never schedules).
    pub sources: Arc<dyn SourceView>,
    /// The server's memo of expensive pure steps.
    pub steps: Arc<Steps>,
    /// When the server stops waiting for this answer; work that would only start after
    /// it is not started (None: no deadline, as for `render`).
    pub deadline: Option<std::time::Instant>,
}

impl Context {
    /// A context without a source engine, for controllers that fetch nothing.
    pub fn at(now: jiff::Timestamp) -> Context {
        Context {
            now,
            sources: Arc::new(NoSources),
            steps: Arc::new(Steps::default()),
            deadline: None,
        }
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

/// A sync's answer, and what it read of the sources and asks of them: the server hands
/// the asks to the engine, and remembers the answer for as long as the engine holds what
/// was read.
#[derive(Debug, Clone)]
pub struct Answer<R> {
    /// The response to send, without `resyncAfterSeconds`: that is `requeue`'s.
    pub response: R,
    /// When the controller wants its parent synced again (the server adds what the
    /// sources ask, see [`Requeue::for_sources`]).
    pub requeue: Requeue,
    /// Each source the answer read, with what it saw and what it asks for.
    pub sources: Vec<SourceUse>,
}

impl<R> Answer<R> {
    /// An answer that read no source, synced again only when something changes.
    pub fn of(response: R) -> Answer<R> {
        Reply::await_change(response).with_sources(Vec::new())
    }
}

/// A controller's response and when it wants the parent synced again, before the sources
/// it read are added ([`Answer`]).
#[derive(Debug, Clone)]
pub struct Reply<R> {
    /// The response, without `resyncAfterSeconds`.
    pub response: R,
    /// When to sync again.
    pub requeue: Requeue,
}

impl<R> Reply<R> {
    /// `response`, synced again only when something changes.
    pub fn await_change(response: R) -> Reply<R> {
        Reply {
            response,
            requeue: Requeue::AwaitChange,
        }
    }

    /// `response`, synced again after `seconds` (0: only when something changes).
    pub fn after_seconds(response: R, seconds: u64) -> Reply<R> {
        Reply {
            response,
            requeue: Requeue::after_seconds(seconds),
        }
    }

    /// This reply with the sources it read: the answer of a sync.
    pub fn with_sources(self, sources: Vec<SourceUse>) -> Answer<R> {
        Answer {
            response: self.response,
            requeue: self.requeue,
            sources,
        }
    }
}

/// Hooks of a CompositeController (parent → children).
pub trait CompositeHooks: Send + Sync + 'static {
    /// The children that should exist for this parent, and its status. Pure: everything
    /// comes from the request and the context.
    ///
    /// # Errors
    /// Only when no complete answer can be built (never for a bad CR: that is a condition).
    fn sync(
        &self,
        request: &CompositeRequest,
        ctx: &Context,
    ) -> Result<Answer<CompositeResponse>, HookError>;

    /// The answer while the parent is being deleted: `finalized: true` once it may go.
    ///
    /// # Errors
    /// As for `sync`.
    fn finalize(
        &self,
        request: &CompositeRequest,
        ctx: &Context,
    ) -> Result<CompositeResponse, HookError>;

    /// No related objects unless the controller asks for some.
    fn customize(&self, _request: &CustomizeRequest) -> Result<CustomizeResponse, HookError> {
        Ok(CustomizeResponse::default())
    }

    /// The parent types this controller answers for (`(apiVersion, kind)`); a call for
    /// another kind (a registration pointing at the wrong path) is refused by name.
    /// Empty: any type.
    fn parent_types(&self) -> &'static [ParentType] {
        &[]
    }
}

/// Hooks of a DecoratorController (target → attachments).
pub trait DecoratorHooks: Send + Sync + 'static {
    /// The attachments, labels and annotations this target should have.
    ///
    /// # Errors
    /// Only when no complete answer can be built (never for a bad annotation: that is
    /// reported on the target).
    fn sync(
        &self,
        request: &DecoratorRequest,
        ctx: &Context,
    ) -> Result<Answer<DecoratorResponse>, HookError>;

    /// The answer while the target is being deleted or stops matching.
    ///
    /// # Errors
    /// As for `sync`.
    fn finalize(
        &self,
        request: &DecoratorRequest,
        ctx: &Context,
    ) -> Result<DecoratorResponse, HookError>;

    /// The types of object this controller decorates (`(apiVersion, kind)`), for tools
    /// that check a file before rendering it. Empty: any type.
    fn parent_types(&self) -> &'static [ParentType] {
        &[]
    }

    /// The related objects Metacontroller should send with every sync (none by default).
    ///
    /// # Errors
    /// Only when no answer can be built.
    fn customize(&self, _request: &CustomizeRequest) -> Result<CustomizeResponse, HookError> {
        Ok(CustomizeResponse::default())
    }
}

/// A parent (or decorated object) type: `(apiVersion, kind)`.
pub type ParentType = (&'static str, &'static str);

/// The parent (or decorated target) a call was about, for logs. Shared strings: an
/// answer sent again from memory names its parent without copying the names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParentRef {
    /// The parent's namespace ("" when cluster-scoped or unknown).
    pub namespace: Arc<str>,
    /// The parent's name ("" when unknown).
    pub name: Arc<str>,
}

impl ParentRef {
    fn of(object: &Value) -> ParentRef {
        let field = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .into()
        };
        ParentRef {
            namespace: field("/metadata/namespace"),
            name: field("/metadata/name"),
        }
    }
}
