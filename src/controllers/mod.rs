//! The controllers metahooks serves, and the seam that plugs one into the server.
//!
//! A controller is pure logic: it gets a parsed Metacontroller request plus a
//! [`Context`] (the clock reading and server-wide settings) and returns a response. It
//! never does I/O. Adding a controller is one module here and one line in
//! [`Registry::standard`].

pub mod apimock;
pub mod common;
pub mod configsync;
#[cfg(test)]
mod fixtures;
pub mod monitoredservice;

mod registry;

use std::sync::Arc;

use serde_json::Value;

pub use self::registry::{CallOutcome, Changes, Prepared, Registry, SlowWork, parse_request};
use crate::error::HookError;
use crate::protocol::{
    CompositeRequest, CompositeResponse, CustomizeRequest, CustomizeResponse, DecoratorRequest,
    DecoratorResponse,
};
use crate::source::{NoSources, Sources};

/// Server-wide settings controllers read (from `serve`/`render` flags).
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    /// Image of the mock-server container (`--mock-image`).
    pub mock_image: String,
    /// Image of the Swagger UI container (`--docs-image`).
    pub docs_image: String,
    /// What CRs may expose through their children (`--ingress-host`, …).
    pub policy: common::policy::ExposurePolicy,
    /// Large definitions validated at once (`serve` passes its compute threads; 0: one
    /// per core, at most 8).
    pub heavy_validations: usize,
}

impl Default for ControllerSettings {
    fn default() -> ControllerSettings {
        ControllerSettings {
            mock_image: apimock::DEFAULT_MOCK_IMAGE.to_owned(),
            docs_image: apimock::DEFAULT_DOCS_IMAGE.to_owned(),
            policy: common::policy::ExposurePolicy::default(),
            heavy_validations: 0,
        }
    }
}

/// What a controller may know besides the request. Filled by the server per call.
#[derive(Clone)]
pub struct Context {
    /// The time to stamp on conditions that appear or flip in this answer.
    pub now: jiff::Timestamp,
    /// The config-source cache (read side; never blocks).
    pub sources: Arc<dyn Sources>,
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
    ) -> Result<CompositeResponse, HookError>;

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

    /// The sync answer if it can be given without slow work (validating a definition
    /// not seen before, or anything else that can take more than a fraction of a
    /// millisecond): the server tries this on an async worker first for a small call.
    /// `None` sends the call where slow work may run (a compute thread, or for work on a
    /// small request alone a task of its own), where [`CompositeHooks::sync`] answers it;
    /// so does the default, for a controller that has not checked its slow paths.
    fn try_cached(
        &self,
        _request: &CompositeRequest,
        _ctx: &Context,
    ) -> Option<Result<CompositeResponse, HookError>> {
        None
    }

    /// Whether an answer depends on the request bytes alone (not on sources, not on
    /// the clock beyond stamping transition times), so that the same request may get
    /// the same answer again from a memo. A repeated request then carries the
    /// transition time of its first answer, which is when the condition did change.
    fn answers_only_from_request(&self) -> bool {
        false
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
    ) -> Result<DecoratorResponse, HookError>;

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
