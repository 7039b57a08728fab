//! CompositeController sync/finalize request and response (protocol §3).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ObjectMap, null_as_default};

/// The body Metacontroller POSTs to a CompositeController's sync or finalize hook.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompositeRequest {
    /// The whole CompositeController object; only `spec.hooks.*.version` is read.
    #[serde(default)]
    pub controller: Value,
    /// The parent object, as stored.
    #[serde(default)]
    pub parent: Value,
    /// The children that exist, by type then name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub children: ObjectMap,
    /// Related objects the customize hook asked for.
    #[serde(default, deserialize_with = "null_as_default")]
    pub related: ObjectMap,
    /// True when the parent is being deleted (finalize).
    #[serde(default, deserialize_with = "null_as_default")]
    pub finalizing: bool,
}

/// What a composite hook answers. `status` replaces the parent's whole status and
/// `children` is the complete desired set: a child left out is deleted.
///
/// Fields are optional so that any valid response round-trips unchanged; the constructors
/// used by our controllers always fill `status` and `children`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompositeResponse {
    /// The parent's status to write (an object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    /// Every child that should exist: one left out is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub children: Option<Vec<Value>>,
    /// Sync again after this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync_after_seconds: Option<serde_json::Number>,
    /// With finalize: the parent may go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalized: Option<bool>,
}

impl CompositeResponse {
    /// A complete answer: an object status and the full desired children list.
    pub fn new(status: Value, children: Vec<Value>) -> CompositeResponse {
        CompositeResponse {
            status: Some(status),
            children: Some(children),
            resync_after_seconds: None,
            finalized: None,
        }
    }

    /// An answer whose status is a controller's typed status, with no children yet.
    ///
    /// # Errors
    /// The status does not serialise to a JSON object (a bug in the controller).
    pub fn typed(status: &impl serde::Serialize) -> Result<CompositeResponse, StatusError> {
        match serde_json::to_value(status) {
            Ok(status @ Value::Object(_)) => Ok(CompositeResponse::new(status, Vec::new())),
            Ok(other) => Err(StatusError::NotAnObject(other.to_string())),
            Err(e) => Err(StatusError::Unserialisable(e.to_string())),
        }
    }

    /// Asks for one more sync after that many seconds (0 asks for none).
    pub fn with_resync_after(mut self, seconds: u64) -> CompositeResponse {
        self.resync_after_seconds = (seconds > 0).then(|| seconds.into());
        self
    }

    /// Says whether the parent may go (finalize answers).
    pub fn with_finalized(mut self, finalized: bool) -> CompositeResponse {
        self.finalized = Some(finalized);
        self
    }
}

/// Why a typed status could not become the `status` of an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatusError {
    /// It serialised to something other than a JSON object.
    #[error("a status must be a JSON object, not {0}")]
    NotAnObject(String),
    /// It did not serialise at all.
    #[error("cannot serialise a status: {0}")]
    Unserialisable(String),
}
